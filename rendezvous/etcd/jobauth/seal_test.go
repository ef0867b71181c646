package jobauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestSealReusesNoState: a Guard's seals are HMAC-SHA256 over "v1", the
// key and the payload under the job's record key, whichever reused HMAC
// makes them, one after the other or at once; Open takes them back and
// refuses one moved to another key or changed.
func TestSealReusesNoState(t *testing.T) {
	token := Token("seal-test-token-0123456789abcdef")
	log := logrus.New()
	log.SetOutput(io.Discard)
	g := NewGuard(token, log)
	want := func(key, payload string) string {
		m := hmac.New(sha256.New, recordKey(token))
		m.Write([]byte("v1\x00" + key + "\x00" + payload))
		return payload + macSep + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	cases := []struct{ key, payload string }{
		{"/gorun/job/ctl/round", `{"v":1,"kind":"round","data":0}`},
		{"/gorun/job/ctl/round", `{"v":1,"kind":"round","data":1}`},
		{"/gorun/job/join/0/node-a", `{"v":1,"kind":"join","data":{"id":"node-a"}}`},
		{"", ""},
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				for _, tc := range cases {
					if got := g.Seal(tc.key, tc.payload); got != want(tc.key, tc.payload) {
						t.Errorf("Seal(%q, %q) = %q, want %q", tc.key, tc.payload, got, want(tc.key, tc.payload))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, tc := range cases {
		sealed := g.Seal(tc.key, tc.payload)
		if got, ok := g.Open(tc.key, []byte(sealed), 1); !ok || string(got) != tc.payload {
			t.Errorf("Open(%q) = %q, %v; want the payload back", tc.key, got, ok)
		}
		if _, ok := g.Open(tc.key+"x", []byte(sealed), 1); ok {
			t.Errorf("Open of %q's value under another key: accepted", tc.key)
		}
		if _, ok := g.Open(tc.key, []byte("x"+sealed), 1); ok {
			t.Errorf("Open of %q's value changed: accepted", tc.key)
		}
	}
}
