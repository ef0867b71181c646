package secret

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestNew(t *testing.T) {
	a, err := New()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := hex.DecodeString(a.Reveal()); err != nil || len(raw) != 32 || len(a.Reveal()) != 64 {
		t.Errorf("secret of %d characters, %v; want 64 hex digits", len(a.Reveal()), err)
	}
	if bytes.Equal(a, b) {
		t.Error("two secrets are equal")
	}
}

// TestNeverPrinted: whatever prints a Secret, or a struct holding one,
// shows the placeholder; the value is still there for its uses.
func TestNeverPrinted(t *testing.T) {
	s := Secret("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	holder := struct {
		Name string
		S    Secret
	}{"j", s}
	var logged bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logged)
	log.SetFormatter(&logrus.JSONFormatter{})
	log.WithField("secret", s).Info("x")
	js, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, got string }{
		{"%s", fmt.Sprintf("%s", s)},
		{"%v", fmt.Sprintf("%v", s)},
		{"%q", fmt.Sprintf("%q", s)},
		{"%x", fmt.Sprintf("%x", s)},
		{"%+v struct", fmt.Sprintf("%+v", holder)},
		{"%#v struct", fmt.Sprintf("%#v", holder)},
		{"Sprint", fmt.Sprint(s)},
		{"json", string(js)},
		{"logrus", logged.String()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.got, "0011") || strings.Contains(tt.got, hex.EncodeToString([]byte("0011"))) {
				t.Errorf("%s shows the secret: %s", tt.name, tt.got)
			}
			if !strings.Contains(tt.got, Placeholder) && !strings.Contains(tt.got, `\u003csecret\u003e`) {
				t.Errorf("%s lacks %s: %s", tt.name, Placeholder, tt.got)
			}
		})
	}
	if s.Reveal() != string(s) || Secret(nil).String() != "" || len(s.Derive("x")) != 32 {
		t.Error("Reveal, Derive or the empty secret's String is wrong")
	}
	if w := s.JobSecret("run"); len(w) != 64 || bytes.Equal(w, s.JobSecret("other")) {
		t.Errorf("JobSecret: %d characters, the same for two runs: want 64 and distinct", len(w))
	}
}
