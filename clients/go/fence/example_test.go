package fence_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/batonlock/baton/clients/go/fence"
)

// A service behind Guard, and two holders of one lock writing to it: the
// newer holder's write is served, then the older one's is refused.
func ExampleGuard() {
	var value string
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		value = string(b)
	})
	srv := httptest.NewServer((&fence.Guard{Store: fence.NewMemoryStore()}).Wrap(store))
	defer srv.Close()

	put := func(h fence.Holder, body string) int {
		c := &http.Client{Transport: &fence.Transport{Holder: h}} // h: a *baton.Lock in a real program
		req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println(put(fence.Static("jobs/nightly", 1099511627778), "from the new holder"))
	fmt.Println(put(fence.Static("jobs/nightly", 1099511627777), "from the stale holder"))
	fmt.Println(value)
	// Output:
	// 200
	// 409
	// from the new holder
}
