package topology

import (
	"testing"

	"github.com/gorun-dev/gorun/memory"
)

// largeJob is a 131,072-GPU layout (tp8 pp16 cp2, dp 512) of a 128-layer
// dense model.
func largeJob() *Config {
	c := &Config{}
	for k, v := range map[string]any{"world_size": 131072, "tp": 8, "pp": 16, "cp": 2, "num_layers": 128, "hidden_size": 16384,
		"num_attention_heads": 128, "num_query_groups": 8, "ffn_hidden_size": 53248, "vocab_size": 128256, "seq_length": 8192,
		"swiglu": true, "normalization": "RMSNorm", "sequence_parallel": true, "use_distributed_optimizer": true,
		"recompute_granularity": "selective", "global_batch_size": 4096} {
		if err := c.Set(k, v); err != nil {
			panic(err)
		}
	}
	return c
}

// BenchmarkPlan131072 plans the large job: validation, stages, memory and
// advice; PerRank adds every group and every rank's coordinates.
func BenchmarkPlan131072(b *testing.B) {
	for _, perRank := range []bool{false, true} {
		name := "summary"
		if perRank {
			name = "per-rank"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				p, err := MakePlan(largeJob(), 80*memory.GiB, Options{PerRank: perRank})
				if err != nil || !p.Valid {
					b.Fatalf("plan: %v %+v", err, p.Errors)
				}
			}
		})
	}
}
