package memory

import "fmt"

// Stat is one statistic's current value and peak.
type Stat struct {
	Current, Peak int64
}

func (s *Stat) add(n int64) {
	s.Current += n
	s.Peak = max(s.Peak, s.Current)
}

// Stats are the caching allocator's statistics, named as
// torch.cuda.memory_stats names them (aggregate pool).
type Stats struct {
	// AllocatedBytes are the rounded sizes of the blocks handed out.
	AllocatedBytes Stat
	// ReservedBytes are the segments obtained from the device (or the
	// pages mapped, with expandable segments).
	ReservedBytes Stat
	// ActiveBytes are allocated blocks plus freed blocks still waiting
	// for another stream's events: ActiveBytes - AllocatedBytes is the
	// memory held back by cross-stream use.
	ActiveBytes Stat
	// RequestedBytes are the sizes asked for, before rounding.
	RequestedBytes Stat
	Allocation     Stat
	Segment        Stat
	NumAllocRetries,
	NumOOMs,
	NumDeviceAlloc,
	NumDeviceFree int64
	// EventsCreated and EventsQueried count the events the allocator
	// recorded for cross-stream frees and its queries of them.
	EventsCreated, EventsQueried int64
}

// Map flattens the statistics with torch.cuda.memory_stats' keys.
func (s Stats) Map() map[string]int64 {
	m := map[string]int64{}
	for name, st := range map[string]Stat{"allocated_bytes": s.AllocatedBytes, "reserved_bytes": s.ReservedBytes,
		"active_bytes": s.ActiveBytes, "requested_bytes": s.RequestedBytes, "allocation": s.Allocation, "segment": s.Segment} {
		m[name+".all.current"] = st.Current
		m[name+".all.peak"] = st.Peak
	}
	m["num_alloc_retries"] = s.NumAllocRetries
	m["num_ooms"] = s.NumOOMs
	m["num_device_alloc"] = s.NumDeviceAlloc
	m["num_device_free"] = s.NumDeviceFree
	m["num_events_created"] = s.EventsCreated
	m["num_events_queried"] = s.EventsQueried
	return m
}

// OOMError is an allocation that failed after the cache was freed: what
// PyTorch's out-of-memory error reports.
type OOMError struct {
	// Tried is the segment size that could not be obtained; Request the
	// size asked for.
	Tried, Request int64
	Capacity, Free int64
	// Allocated is what the allocator handed out; Reserved what it holds.
	Allocated, Reserved int64
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("device out of memory: tried to allocate %s (for a request of %s); the device has a total capacity of %s of which %s is free; "+
		"of the allocated memory %s is allocated by the caching allocator and %s is reserved but unallocated; if reserved but unallocated memory is large, "+
		"expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) avoid the fragmentation",
		formatSize(e.Tried), formatSize(e.Request), formatSize(e.Capacity), formatSize(e.Free), formatSize(e.Allocated), formatSize(e.Reserved-e.Allocated))
}

// formatSize prints a size as PyTorch's OOM message does.
func formatSize(n int64) string {
	switch {
	case n <= 1024:
		return fmt.Sprintf("%d bytes", n)
	case n <= 1<<20:
		return fmt.Sprintf("%.2f KiB", float64(n)/1024)
	case n <= 1<<30:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
