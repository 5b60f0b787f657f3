//go:build !unix

package server_test

// setRcvbuf does nothing here; dialSmallBuffer still shrinks the buffer
// after the connect, which takes longer to fill.
func setRcvbuf(fd uintptr, n int) error { return nil }
