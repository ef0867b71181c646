package topology

import (
	"reflect"
	"testing"
)

// FuzzParseYAML feeds arbitrary files to the parser and plans whatever it
// accepts: neither may panic or hang.
func FuzzParseYAML(f *testing.F) {
	for _, seed := range []string{
		"world_size: 32\ntp: 4\npp: 4\nvpp: 5\nnum_layers: 80\n",
		"{\"world_size\": 16, \"tensor_model_parallel_size\": 2, \"expert_tensor_parallel_size\": null}",
		"tp: [1, 2]\n", "tp: four\n", "- a\n- b\n", "num_layers: 80\nnum_layers: 40\n", "tensr_model_parallel_size: 2\n",
		"world_size: 9223372036854775807\ntp: 9223372036854775807\npp: 4\n", "", ":::\n\t- x",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseYAML("fuzz.yaml", data)
		if err != nil {
			return
		}
		if _, err := MakePlan(c, 80<<30, Options{}); err != nil {
			t.Fatalf("MakePlan on a parsed config: %v", err)
		}
	})
}

// FuzzFlagValues sets one key from a flag's text, as gorun plan does for
// each flag, and plans the result.
func FuzzFlagValues(f *testing.F) {
	f.Add("tensor_model_parallel_size", "4", "pipeline_model_parallel_size", "2")
	f.Add("tp", "-3", "world", "0")
	f.Add("virtual_pipeline_model_parallel_size", "1000000000", "num_layers", "2")
	f.Add("swiglu", "yes", "order", "pp-dp-tp")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		c := &Config{}
		for _, kv := range [][2]string{{"world_size", "64"}, {k1, v1}, {k2, v2}} {
			fld, ok := lookupField(kv[0])
			if !ok {
				continue
			}
			v, err := ParseValue(fld, kv[1])
			if err != nil {
				continue
			}
			if fld.Kind != reflect.ValueOf(v).Kind() {
				t.Fatalf("ParseValue(%s, %q) = %T", fld.Key, kv[1], v)
			}
			if err := c.Set(kv[0], v); err != nil {
				t.Fatalf("Set(%s, %v): %v", kv[0], v, err)
			}
		}
		if _, err := MakePlan(c, 0, Options{}); err != nil {
			t.Fatalf("MakePlan: %v", err)
		}
	})
}
