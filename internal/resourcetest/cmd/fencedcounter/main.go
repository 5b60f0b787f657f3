// Command fencedcounter is an HTTP service behind the fencing kit's Go
// middleware (fence.Guard, with its memory store), for the other-language
// clients' tests of their Baton-Fence headers: GET / answers the value,
// PUT / sets it to the body. It prints "serving http://ADDR" and runs
// until it is killed.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/batonlock/baton/clients/go/fence"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var (
		mu    sync.Mutex
		value = "0 "
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPut {
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			value = string(b)
		}
		io.WriteString(w, value)
	})
	fmt.Printf("serving http://%s\n", ln.Addr())
	if err := http.Serve(ln, (&fence.Guard{Store: fence.NewMemoryStore()}).Wrap(h)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
