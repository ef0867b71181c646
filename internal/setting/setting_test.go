package setting

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// flags names two settings as a command line would.
func flags(s Name) string {
	return map[Name]string{"HangTimeout": "--hang-timeout", "LogDir": "--log-dir", "RestartBackoff": "--restart-backoff"}[s]
}

// TestErrorNamesSettings: an Error reads with the settings' own names,
// and Message names them as it is told, through any wrapping, keeping the
// context around them and what they wrap.
func TestErrorNamesSettings(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("invalid thing")
	cause := fs.ErrPermission
	hang := Errorf("%s: %v, want 0 (off) or more", Name("HangTimeout"), -1)
	dir := Errorf("%s=%q: %w", Name("LogDir"), "/x", cause)
	nested := Errorf("%s: %w", Name("LogDir"), Errorf("%w: %s is below %s", sentinel, Name("HangTimeout"), Name("RestartBackoff")))
	for _, tt := range []struct {
		name      string
		err       error
		own, flag string
		wraps     []error
	}{
		{"plain", hang, "HangTimeout: -1, want 0 (off) or more", "--hang-timeout: -1, want 0 (off) or more", nil},
		{"with a cause", dir, `LogDir="/x": permission denied`, `--log-dir="/x": permission denied`, []error{cause}},
		{"wrapped", fmt.Errorf("start: %w", dir), `start: LogDir="/x": permission denied`, `start: --log-dir="/x": permission denied`, []error{cause}},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", hang)), "a: b: HangTimeout: -1, want 0 (off) or more", "a: b: --hang-timeout: -1, want 0 (off) or more", nil},
		{"joined", errors.Join(hang, dir), "HangTimeout: -1, want 0 (off) or more\nLogDir=\"/x\": permission denied", "--hang-timeout: -1, want 0 (off) or more\n--log-dir=\"/x\": permission denied", []error{cause}},
		{"nested, with a sentinel", nested, "LogDir: invalid thing: HangTimeout is below RestartBackoff", "--log-dir: invalid thing: --hang-timeout is below --restart-backoff", []error{sentinel}},
		{"a setting without a name", Errorf("%s %d", Name("Other"), 3), "Other 3", "Other 3", nil},
		{"not one", fmt.Errorf("HangTimeout: %w", cause), "HangTimeout: permission denied", "HangTimeout: permission denied", []error{cause}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.own {
				t.Errorf("Error() = %q; want %q", got, tt.own)
			}
			if got := Message(tt.err, flags); got != tt.flag {
				t.Errorf("Message = %q; want %q", got, tt.flag)
			}
			for _, w := range tt.wraps {
				if !errors.Is(tt.err, w) {
					t.Errorf("%v does not wrap %v", tt.err, w)
				}
			}
		})
	}
	var e *Error
	if !errors.As(fmt.Errorf("x: %w", dir), &e) || e.Setting != "LogDir" {
		t.Errorf("errors.As: %v, setting %q; want the LogDir error", e, e.Setting)
	}
	if got := nested.(*Error).Settings(); len(got) != 1 || got[0] != "LogDir" {
		t.Errorf("Settings() = %q; want [LogDir]", got)
	}
	if Message(nil, flags) != "" {
		t.Error("Message(nil) is not empty")
	}
}
