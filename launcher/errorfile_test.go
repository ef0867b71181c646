package launcher

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
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

// TestWriteRootCause: the root cause's error file is copied to the
// launcher's own TORCHELASTIC_ERROR_FILE, with the exit code as the
// nested message's errorCode, as torchrun's @record does; an earlier
// file or a link there is replaced, not written through; nothing is
// written without a worker's file or without the variable.
func TestWriteRootCause(t *testing.T) {
	t.Parallel()
	nested := `{"message": {"message": "RuntimeError: sad", "extraInfo": {"py_callstack": "tb", "timestamp": "1700000000"}}}`
	flat := `{"message": "RuntimeError: sad", "timestamp": 1700000000}`
	for _, tt := range []struct {
		name, worker string // "" for no worker file
		code         int
		plant        string // "file" or "link" at the destination
		unset        bool
		want         string // "" for no file
	}{
		{name: "nested", worker: nested, code: 3, want: `{"message":{"errorCode":3,"extraInfo":{"py_callstack":"tb","timestamp":"1700000000"},"message":"RuntimeError: sad"}}`},
		{name: "flat", worker: flat, code: 1, want: `{"message":"RuntimeError: sad","timestamp":1700000000}`},
		{name: "earlier file replaced", worker: flat, code: 1, plant: "file", want: `{"message":"RuntimeError: sad","timestamp":1700000000}`},
		{name: "link replaced", worker: flat, code: 1, plant: "link", want: `{"message":"RuntimeError: sad","timestamp":1700000000}`},
		{name: "no worker file", code: 1},
		{name: "variable unset", worker: flat, code: 1, unset: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			f := Failure{ExitCode: tt.code, errorFile: filepath.Join(dir, "worker.json")}
			if tt.worker != "" {
				if err := os.WriteFile(f.errorFile, []byte(tt.worker), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			dst, victim := filepath.Join(dir, "launcher.json"), filepath.Join(dir, "victim")
			os.WriteFile(victim, []byte("keep"), 0o600)
			switch tt.plant {
			case "file":
				os.WriteFile(dst, []byte("old"), 0o600)
			case "link":
				os.Symlink(victim, dst)
			}
			env := []string{workerenv.ErrorFile + "=" + dst}
			if tt.unset {
				env = nil
			}
			if err := writeRootCause(env, f); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if tt.want == "" {
				if err == nil {
					t.Errorf("wrote %s: %s", dst, got)
				}
				return
			}
			if string(got) != tt.want {
				t.Errorf("%s = %s; want %s", dst, got, tt.want)
			}
			if b, _ := os.ReadFile(victim); string(b) != "keep" {
				t.Errorf("written through a link: %q", b)
			}
		})
	}
}
