package commbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Floors are this machine's limits, measured in the same run.
type Floors struct {
	// MemcpyGBps copies 64 MiB in memory.
	MemcpyGBps float64 `json:"memcpy_GBps"`
	// TCPStreamGBps is each of two opposite loopback TCP streams.
	TCPStreamGBps float64 `json:"tcp_stream_GBps"`
}

// MeasureFloors measures memcpy and loopback TCP.
func MeasureFloors(ctx context.Context) (Floors, error) {
	var f Floors
	src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
	copy(dst, src) // fault the pages in
	start := time.Now()
	const copies = 8
	for range copies {
		copy(dst, src)
	}
	f.MemcpyGBps = float64(copies*len(src)) / time.Since(start).Seconds() / 1e9
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return f, err
	}
	defer ln.Close()
	const total = 512 << 20
	var wg sync.WaitGroup
	var server net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		server, err = ln.Accept()
	}()
	client, derr := net.Dial("tcp", ln.Addr().String())
	wg.Wait()
	if derr != nil || err != nil {
		return f, fmt.Errorf("loopback tcp: %v %v", derr, err)
	}
	for _, c := range []net.Conn{client, server} {
		tc := c.(*net.TCPConn)
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
	}
	defer client.Close()
	defer server.Close()
	buf := make([]byte, 1<<20)
	pump := func(c net.Conn) {
		defer wg.Done()
		for sent := 0; sent < total; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
	drain := func(c net.Conn) {
		defer wg.Done()
		in := make([]byte, 1<<20)
		for got := 0; got < total; {
			n, err := c.Read(in)
			if err != nil {
				return
			}
			got += n
		}
	}
	start = time.Now()
	wg.Add(4)
	go pump(client)
	go pump(server)
	go drain(client)
	go drain(server)
	wg.Wait()
	f.TCPStreamGBps = float64(total) / time.Since(start).Seconds() / 1e9
	return f, ctx.Err()
}

// glooScript times torch.distributed all_reduce on gloo (float32, max
// over ranks per iteration, the median of the iterations), one JSON line
// per size from rank 0; it is launched through gorun.
const glooScript = `import json, os, statistics, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
iters, warmup = int(os.environ["ITERS"]), int(os.environ["WARMUP"])
for nbytes in [int(s) for s in os.environ["SIZES"].split(",")]:
    x = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(x)
    durs = torch.zeros(iters, dtype=torch.float64)
    for i in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        durs[i] = time.perf_counter() - t0
    dist.all_reduce(durs, op=dist.ReduceOp.MAX)
    if rank == 0:
        t = statistics.median(durs.tolist())
        print(json.dumps({"size_bytes": nbytes, "time_us": t * 1e6, "algbw_GBps": nbytes / t / 1e9}), flush=True)
dist.destroy_process_group()
`

// GlooRow is gloo's all-reduce at one size.
type GlooRow struct {
	SizeBytes int64   `json:"size_bytes"`
	TimeUS    float64 `json:"time_us"`
	AlgBW     float64 `json:"algbw_GBps"`
}

// MeasureGloo runs glooScript on n workers through gorun with python.
func MeasureGloo(ctx context.Context, gorun, python string, n int, sizes []int64, iters, warmup int) ([]GlooRow, error) {
	dir, err := os.MkdirTemp("", "gorun-bench-gloo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "allreduce_gloo.py")
	if err := os.WriteFile(script, []byte(glooScript), 0o644); err != nil {
		return nil, err
	}
	var ss []string
	for _, s := range sizes {
		ss = append(ss, strconv.FormatInt(s, 10))
	}
	cmd := exec.CommandContext(ctx, gorun, "--nproc-per-node="+strconv.Itoa(n), "--python", python, "--no-prefix", script)
	cmd.Env = append(os.Environ(), "SIZES="+strings.Join(ss, ","), "ITERS="+strconv.Itoa(iters), "WARMUP="+strconv.Itoa(warmup))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("gloo anchor (%s with torch): %v: %s", python, err, lastLine(stderr.String()))
	}
	var rows []GlooRow
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r GlooRow
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.SizeBytes > 0 {
			rows = append(rows, r)
		}
	}
	return rows, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
