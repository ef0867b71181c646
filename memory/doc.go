// Package memory is gorun's device memory: a device runtime (streams,
// events, raw memory, enqueued work) with a simulated device that checks
// every use of memory against the stream order; a caching allocator
// modelled on PyTorch's CUDA caching allocator; reference-counted
// tensors; the reuse engine that keeps the tensors of collectives safe
// under MULTI_STREAM_MEMORY_REUSE modes 0-3; and the theoretical
// training-memory estimators of Megatron-LM and Megatron-Bridge.
//
// Tensor lifetime. Go's garbage collector frees Go memory, but it cannot
// know when device memory may be reused: a kernel or a collective queued
// on a stream may still read it. So device memory is owned by explicit
// reference counts. A *Tensor is one strong reference to a Storage: Retain
// makes another, Release drops it, and the storage's block goes back to
// the allocator when the last reference is released. A "strong reference"
// (what mode 2's TensorShelf holds) is a Retained *Tensor; a "weak
// reference" (mode 1's) is a *Storage kept without a count, that can only
// report whether it is still Alive.
//
// Streams. A block freed by its owner is reused only for allocations on
// the stream it was allocated on; work on other streams is protected by
// RecordStream (an event recorded at free time and found complete by a
// later allocation) or by the reuse engine (see Engine for the contract
// the process groups follow).
package memory
