// Package memory estimates device memory. This part holds the
// theoretical training-memory estimators of Megatron-LM
// (report_theoretical_memory) and Megatron-Bridge
// (estimate_training_memory), ported in float64 with upstream's order of
// operations so that they give upstream's numbers: the memory of the most
// loaded GPU for a model, a parallel layout and a batch, before any GPU is
// used.
package memory
