// Command faultproxy runs the project's fault proxy (internal/faultproxy) as
// a process, for the tests of clients in other languages: it forwards every
// connection made to it to -target, with -delay added each way, logs every
// chunk it forwards as a JSON line, and takes commands on stdin.
//
//	faultproxy -target 127.0.0.1:7070 [-delay 20ms] [-log frames.jsonl]
//
// Its first line on stdout is "listening HOST:PORT". Commands, one a line:
// "stall up|down|both", "resume up|down|both", "drop up|down|both",
// "undrop up|down|both", "delay DURATION" (each way), "reset" (RST to every
// link). Each is answered "ok" or "error: ...". It exits on EOF of stdin or
// on SIGTERM/SIGINT.
//
// A log line: {"link":1,"dir":"up","read_ns":N,"sent_ns":N,"hex":"...",
// "dropped":false}; times are nanoseconds on the proxy's monotonic clock
// since it started (sent_ns 0 when dropped).
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
)

func main() {
	target := flag.String("target", "", "`host:port` to forward to (required)")
	delay := flag.Duration("delay", 0, "delay added to every chunk, each way")
	logFile := flag.String("log", "", "`file` for the JSON-lines log of every chunk")
	flag.Parse()
	if *target == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "faultproxy: usage: faultproxy -target HOST:PORT [-delay D] [-log FILE]")
		os.Exit(2)
	}
	p, err := faultproxy.New(*target)
	if err != nil {
		fmt.Fprintf(os.Stderr, "faultproxy: %v\n", err)
		os.Exit(1)
	}
	defer p.Close()
	p.SetDelay(faultproxy.Both, *delay)
	start := time.Now()
	if *logFile != "" {
		f, err := os.Create(*logFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "faultproxy: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		var mu sync.Mutex
		enc := json.NewEncoder(f)
		p.SetTap(func(c faultproxy.Chunk) {
			rec := struct {
				Link    int    `json:"link"`
				Dir     string `json:"dir"`
				ReadNs  int64  `json:"read_ns"`
				SentNs  int64  `json:"sent_ns"`
				Hex     string `json:"hex"`
				Dropped bool   `json:"dropped"`
			}{c.Link, c.Dir.String(), c.Read.Sub(start).Nanoseconds(), 0, hex.EncodeToString(c.Data), c.Dropped}
			if !c.Sent.IsZero() {
				rec.SentNs = c.Sent.Sub(start).Nanoseconds()
			}
			mu.Lock()
			enc.Encode(rec)
			mu.Unlock()
		})
		defer p.SetTap(nil)
	}
	fmt.Printf("listening %s\n", p.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case line, ok := <-lines:
			if !ok {
				return
			}
			if err := command(p, line); err != nil {
				fmt.Printf("error: %v\n", err)
			} else {
				fmt.Println("ok")
			}
		}
	}
}

func command(p *faultproxy.Proxy, line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return fmt.Errorf("empty command")
	}
	dir := func() (faultproxy.Direction, error) {
		if len(f) != 2 {
			return 0, fmt.Errorf("%s needs one direction: up, down or both", f[0])
		}
		switch f[1] {
		case "up":
			return faultproxy.Up, nil
		case "down":
			return faultproxy.Down, nil
		case "both":
			return faultproxy.Both, nil
		}
		return 0, fmt.Errorf("unknown direction %q (want up, down or both)", f[1])
	}
	switch f[0] {
	case "stall", "resume", "drop", "undrop":
		d, err := dir()
		if err != nil {
			return err
		}
		switch f[0] {
		case "stall":
			p.Stall(d)
		case "resume":
			p.Resume(d)
		case "drop":
			p.Drop(d, true)
		case "undrop":
			p.Drop(d, false)
		}
	case "delay":
		if len(f) != 2 {
			return fmt.Errorf("delay needs a duration")
		}
		d, err := time.ParseDuration(f[1])
		if err != nil || d < 0 {
			return fmt.Errorf("bad delay %q", f[1])
		}
		p.SetDelay(faultproxy.Both, d)
	case "reset":
		p.Reset()
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}
