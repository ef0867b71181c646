package etcd

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func TestParseConf(t *testing.T) {
	tests := []struct {
		name string
		kv   map[string]string
		env  map[string]string
		want func(Conf) bool
		err  string
		warn string
	}{
		{name: "defaults", want: func(c Conf) bool {
			return c.lastCall == 30*time.Second && c.join == 600*time.Second && c.leaseTTL == 4*time.Second && c.prefix == "/gorun" && c.isHost == nil && c.connect == time.Minute && c.storeLogLevel == "panic"
		}},
		{name: "store log level", kv: map[string]string{"store_log_level": "info"}, want: func(c Conf) bool { return c.storeLogLevel == "info" }},
		{name: "bad store log level", kv: map[string]string{"store_log_level": "loud"}, err: `store_log_level="loud": want debug, info, warn, error, panic`},
		{name: "is_host=false is kept", kv: map[string]string{"is_host": "false", "connect_timeout": "5"},
			want: func(c Conf) bool { return c.isHost != nil && !*c.isHost && c.connect == 5*time.Second }},
		{name: "token file from the environment", env: map[string]string{"GORUN_RDZV_TOKEN_FILE": "/t"},
			want: func(c Conf) bool { return c.token.File == "/t" }},
		{name: "values", kv: map[string]string{"last_call_timeout": "0.5", "join_timeout": "2m", "lease_ttl": "3", "is_host": "true", "etcd_prefix": "/x"},
			want: func(c Conf) bool {
				return c.lastCall == 500*time.Millisecond && c.join == 2*time.Minute && c.leaseTTL == 3*time.Second && c.isHost != nil && *c.isHost && c.prefix == "/x"
			}},
		{name: "secrets from the environment", env: map[string]string{"GORUN_RDZV_USER": "u", "GORUN_RDZV_PASSWORD": "p", "GORUN_RDZV_CACERT": "/ca"},
			want: func(c Conf) bool { return c.user == "u" && c.password == "p" && c.tls.TrustedCAFile == "/ca" }},
		{name: "flag beats environment", kv: map[string]string{"user": "flag"}, env: map[string]string{"GORUN_RDZV_USER": "env"},
			want: func(c Conf) bool { return c.user == "flag" }},
		{name: "bad duration", kv: map[string]string{"join_timeout": "soon"}, err: "join_timeout"},
		{name: "bad bool", kv: map[string]string{"is_host": "maybe"}, err: "is_host"},
		{name: "cert without key", kv: map[string]string{"cert": "/c"}, err: "Conf.cert and Conf.key go together"},
		{name: "unknown torchrun key", kv: map[string]string{"read_timeout": "60"}, warn: "read_timeout",
			want: func(Conf) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var logs bytes.Buffer
			log := logrus.New()
			log.SetOutput(&logs)
			c, err := parseConf(tt.kv, log)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseConf(%v) error = %v; want one naming %q", tt.kv, err, tt.err)
				}
				return
			}
			if err != nil || !tt.want(c) {
				t.Fatalf("parseConf(%v) = %+v, %v", tt.kv, c, err)
			}
			if tt.warn != "" && !strings.Contains(logs.String(), tt.warn) {
				t.Errorf("no warning about %q: %s", tt.warn, logs.String())
			}
			if strings.Contains(logs.String(), c.password) && c.password != "" {
				t.Errorf("password logged: %s", logs.String())
			}
		})
	}
}

func TestIsLocal(t *testing.T) {
	tests := []struct {
		endpoint, local string
		want            bool
	}{
		{"127.0.0.2:1", "127.0.0.2", true},
		{"127.0.0.1:1", "127.0.0.2", false},
		{"localhost:1", "", true},
		{"127.0.0.1:1", "", true},
		{"192.0.2.77:1", "", false},
		{"nonsense", "", false},
	}
	for _, tt := range tests {
		if got := isLocal(context.Background(), tt.endpoint, tt.local); got != tt.want {
			t.Errorf("isLocal(%q, %q) = %v; want %v", tt.endpoint, tt.local, got, tt.want)
		}
	}
}
