package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
)

func seal(tok rendezvous.Token, key, payload string) string {
	m := hmac.New(sha256.New, tok.Derive("gorun rendezvous records v1"))
	m.Write([]byte("v1\x00"))
	m.Write([]byte(key))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return payload + "\n#" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func main() {
	ep := flag.String("ep", "127.0.0.1:2379", "")
	user := flag.String("user", "", "")
	pass := flag.String("pass", "", "")
	authTok := flag.String("authtoken", "", "derive gorun user password from this token")
	sealTok := flag.String("seal", "", "seal value with this token")
	op := flag.String("op", "get", "get|put|del|loop|dump|watch")
	key := flag.String("key", "", "")
	val := flag.String("val", "", "")
	size := flag.Int("size", 0, "if >0, value of this many bytes")
	dur := flag.Duration("dur", 10*time.Second, "")
	flag.Parse()
	u, p := *user, *pass
	if *authTok != "" {
		u, p = rendezvous.EtcdUser, rendezvous.Token(*authTok).EtcdPassword()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*ep}, DialTimeout: 3 * time.Second, Username: u, Password: p, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("new:", err)
		os.Exit(1)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *dur+5*time.Second)
	defer cancel()
	v := *val
	if *size > 0 {
		v = strings.Repeat("x", *size)
	}
	if *sealTok != "" {
		v = seal(rendezvous.Token(*sealTok), *key, v)
	}
	switch *op {
	case "get":
		r, err := cli.Get(ctx, *key)
		if err != nil {
			fmt.Println("get:", err)
			os.Exit(1)
		}
		for _, kv := range r.Kvs {
			fmt.Printf("%s rev=%d len=%d %q\n", kv.Key, kv.ModRevision, len(kv.Value), trunc(kv.Value))
		}
	case "dump":
		r, err := cli.Get(ctx, *key, clientv3.WithPrefix())
		if err != nil {
			fmt.Println("get:", err)
			os.Exit(1)
		}
		for _, kv := range r.Kvs {
			fmt.Printf("%s rev=%d lease=%d len=%d %q\n", kv.Key, kv.ModRevision, kv.Lease, len(kv.Value), trunc(kv.Value))
		}
	case "put":
		_, err := cli.Put(ctx, *key, v)
		fmt.Println("put:", err)
	case "del":
		_, err := cli.Delete(ctx, *key)
		fmt.Println("del:", err)
	case "loop":
		end := time.Now().Add(*dur)
		n := 0
		for time.Now().Before(end) {
			if _, err := cli.Put(ctx, *key, fmt.Sprintf("%s%d", v, n)); err != nil {
				fmt.Println("put:", err)
			}
			n++
		}
		fmt.Println("puts:", n)
	case "delloop":
		end := time.Now().Add(*dur)
		n := 0
		w := cli.Watch(ctx, *key)
		for time.Now().Before(end) {
			select {
			case wr := <-w:
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypePut {
						cli.Delete(ctx, *key)
						n++
						fmt.Printf("deleted %q at rev %d\n", trunc(ev.Kv.Value), ev.Kv.ModRevision)
					}
				}
			case <-time.After(100 * time.Millisecond):
			}
		}
		fmt.Println("dels:", n)
	}
}

func trunc(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}
