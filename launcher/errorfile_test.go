package launcher

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReadErrorFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		path string
		want *ErrorReport
		err  bool
	}{
		{"record layout", write("a.json", `{"message": {"message": "RuntimeError: boom from rank 1", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"x.py\"\nRuntimeError: boom from rank 1\n", "timestamp": "1795966900"}}}`),
			&ErrorReport{Message: "RuntimeError: boom from rank 1", Traceback: "Traceback (most recent call last):\n  File \"x.py\"\nRuntimeError: boom from rank 1\n", Time: time.Unix(1795966900, 0)}, false},
		{"flat layout", write("b.json", `{"message": "oops", "timestamp": 1700000000}`),
			&ErrorReport{Message: "oops", Time: time.Unix(1700000000, 0)}, false},
		{"missing", filepath.Join(dir, "none.json"), nil, false},
		{"no path", "", nil, false},
		{"garbage", write("c.json", `not json`), nil, true},
		{"wrong type", write("d.json", `{"message": 5}`), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadErrorFile(tt.path)
			if tt.err {
				if err == nil {
					t.Fatalf("ReadErrorFile = %+v; want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tt.want == nil) || (got != nil && (got.Message != tt.want.Message || got.Traceback != tt.want.Traceback || !got.Time.Equal(tt.want.Time))) {
				t.Fatalf("ReadErrorFile = %+v; want %+v", got, tt.want)
			}
		})
	}
}
