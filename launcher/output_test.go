package launcher

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
)

func TestPumpLines(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
	tests := []struct {
		name, in, wantConsole string
	}{
		{"lines", "a\nb\n", "P:a\nP:b\n"},
		{"partial last line", "a\nb", "P:a\nP:b\n"},
		{"empty", "", ""},
		{"long line split", long + "\n", "P:" + long[:maxLine] + "\nP:" + long[maxLine:] + "\n"},
		{"carriage returns kept", "10%\r20%\n", "P:10%\r20%\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var console, file bytes.Buffer
			if err := pump(strings.NewReader(tt.in), &file, NewConsole(&console), "P:"); err != nil {
				t.Fatal(err)
			}
			if console.String() != tt.wantConsole {
				t.Errorf("console = %q; want %q", console.String(), tt.wantConsole)
			}
			if file.String() != tt.in {
				t.Errorf("file = %q; want the raw input %q", file.String(), tt.in)
			}
		})
	}
}

// chunkReader returns its data in small pieces, so lines arrive split
// across reads as they do from a pipe.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := min(r.n, len(p), len(r.data))
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

// TestConsoleNeverMixesLines runs many pumps into one console and checks
// that every console line holds exactly one worker's line.
func TestConsoleNeverMixesLines(t *testing.T) {
	const workers, lines = 8, 500
	var out bytes.Buffer
	console := NewConsole(&out)
	var wg sync.WaitGroup
	for w := range workers {
		var b strings.Builder
		tag := string(rune('A' + w))
		for range lines {
			b.WriteString(strings.Repeat(tag, 37) + "\n")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = pump(&chunkReader{data: []byte(b.String()), n: 7}, nil, console, "["+tag+"]:")
		}()
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != workers*lines {
		t.Fatalf("got %d lines; want %d", len(got), workers*lines)
	}
	for _, l := range got {
		tag := l[1:2]
		if l != "["+tag+"]:"+strings.Repeat(tag, 37) {
			t.Fatalf("mixed line %q", l)
		}
	}
}

// failingWriter fails every write, as a file on a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

func TestPumpKeepsConsoleWhenFileFails(t *testing.T) {
	var console bytes.Buffer
	err := pump(strings.NewReader("a\nb\n"), failingWriter{}, NewConsole(&console), "")
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("pump error = %v; want the file's error", err)
	}
	if console.String() != "a\nb\n" {
		t.Errorf("console = %q; want every line", console.String())
	}
}
