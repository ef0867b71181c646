package rendezvous

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestTokenIsNeverPrinted: a token printed by any verb, or marshalled,
// shows a placeholder; the token itself is still there for its uses.
func TestTokenIsNeverPrinted(t *testing.T) {
	tok := Token("a-job-token-0123456789abcdef0123456789")
	b, err := json.Marshal(struct{ T Token }{tok})
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprintf("%s", tok), fmt.Sprintf("%v", tok), fmt.Sprintf("%+v", tok), fmt.Sprintf("%#v", tok),
		fmt.Sprintf("%q", tok), fmt.Sprintf("%x", tok), fmt.Sprint(tok), string(b)} {
		if strings.Contains(out, "0123456789") || strings.Contains(out, fmt.Sprintf("%x", []byte(tok))) {
			t.Errorf("printed %q", out)
		}
	}
	if string(tok) != "a-job-token-0123456789abcdef0123456789" || len(tok.Derive("x")) != 32 {
		t.Error("the token itself changed")
	}
	if Token(nil).String() != "" {
		t.Error("an empty token prints something")
	}
}
