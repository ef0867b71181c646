// Package comm gives Go programs launched by gorun process groups and
// collectives: AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll,
// Send/Recv and Barrier on memory.Tensors, asynchronous (a Work to Wait
// for) or synchronous. Each group runs its collectives in order on its own
// communication stream of the device, and hands their tensors to the
// memory reuse engine, so tensor lifetime follows
// MULTI_STREAM_MEMORY_REUSE.
//
// The CPU backend is pure Go on the simulated device: ranks bootstrap
// through a store served by rank 0 at MASTER_ADDR:MASTER_PORT (what
// torchrun and gorun give every worker), connect to each other over TCP,
// and run ring algorithms (all-reduce as reduce-scatter then all-gather)
// for any world size.
package comm
