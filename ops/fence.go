package ops

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// fenceJSON answers GET /v1/locks/{name}/fence: whether token is the token
// of a holder of name now, and the tokens of the holders now.
type fenceJSON struct {
	Error   string   `json:"error,omitempty"` // on 409 only
	Name    string   `json:"name"`
	Token   string   `json:"token_str"`
	Current bool     `json:"current"`
	Tokens  []string `json:"tokens"` // the holders' tokens in grant order; never null
}

// fence answers GET /v1/locks/{name}/fence?token=T: 200 when T is the
// token of a current holder of name, 409 with the current holders' tokens
// otherwise (none when nobody holds it). Tokens are decimal strings, since
// they pass 2^53. The answer is true when it is made, and no longer than
// that: a resource that acts on it races the next grant (docs/fencing.md).
func (h *handler) fence(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	raw, ok := q["token"]
	if !ok || len(raw) != 1 {
		writeError(w, http.StatusBadRequest, "fence check needs exactly one ?token=T, T the fencing token in decimal")
		return
	}
	token, err := parseToken(raw[0])
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := fenceJSON{Name: name, Token: strconv.FormatUint(token, 10), Tokens: []string{}}
	if v, held := h.b.Lock(name); held {
		holders := v.Holders
		if len(holders) == 0 && v.Holder != nil {
			holders = append(holders, *v.Holder)
		}
		for _, hv := range holders {
			out.Tokens = append(out.Tokens, strconv.FormatUint(hv.Token, 10))
			if hv.Token == token {
				out.Current = true
			}
		}
	}
	if out.Current {
		writeJSON(w, http.StatusOK, out)
		return
	}
	switch len(out.Tokens) {
	case 0:
		out.Error = fmt.Sprintf("token %d is not current: lock %q has no holder", token, name)
	case 1:
		out.Error = fmt.Sprintf("token %d is not current: lock %q is held with token %s", token, name, out.Tokens[0])
	default:
		out.Error = fmt.Sprintf("token %d is not current: lock %q is held with tokens %s", token, name, strings.Join(out.Tokens, ", "))
	}
	writeJSON(w, http.StatusConflict, out)
}

// parseToken reads a fencing token in decimal: digits only, at most
// 2^64-1, never 0.
func parseToken(s string) (uint64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("token %q is not a decimal number", truncate(s, 40))
	}
	t, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("token %q is larger than 2^64-1, the largest fencing token", truncate(s, 40))
	case t == 0:
		return 0, fmt.Errorf("token 0 is never granted")
	}
	return t, nil
}

// truncate cuts s to n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
