package memory

// Sizes of PyTorch's CUDA caching allocator (docs/sources.md).
const (
	minBlockSize  = 512      // every size is rounded up to a multiple
	smallSize     = 1 << 20  // requests up to this use the small pool
	smallBuffer   = 2 << 20  // small segments (and small expandable pages)
	largeBuffer   = 20 << 20 // segments for requests below minLargeAlloc (and large pages)
	minLargeAlloc = 10 << 20
	roundLarge    = 2 << 20 // large segments are rounded up to this
)

// roundSize rounds a request to the allocator's granularity.
func roundSize(size int64) int64 {
	if size < minBlockSize {
		return minBlockSize
	}
	return (size + minBlockSize - 1) / minBlockSize * minBlockSize
}

// segmentSize is the size of a new segment for a rounded request.
func segmentSize(size int64) int64 {
	switch {
	case size <= smallSize:
		return smallBuffer
	case size < minLargeAlloc:
		return largeBuffer
	}
	return (size + roundLarge - 1) / roundLarge * roundLarge
}

// isSmall tells the pool of a rounded request.
func isSmall(size int64) bool { return size <= smallSize }
