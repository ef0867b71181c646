// Package topology plans Megatron-style parallel layouts before a job
// starts: the dimensions (tensor, pipeline, virtual pipeline, context,
// expert and data parallel), the rank groups that Megatron Core builds for
// them (identical to its RankGenerator, dense and expert), the placement
// of transformer layers on pipeline stages, and the rules a layout, a
// model and a batch must satisfy. It needs no GPU and no PyTorch.
package topology
