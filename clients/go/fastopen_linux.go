package baton

import (
	"net"
	"syscall"
)

// tcpFastOpenConnect is TCP_FASTOPEN_CONNECT (Linux 4.11): connect returns
// at once, and the first write goes out in the SYN when the kernel has a
// cookie for the server (the first connection to a server fetches one with
// an ordinary handshake).
const tcpFastOpenConnect = 30

func setFastOpenConnect(fd uintptr) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpFastOpenConnect, 1)
}

const fastOpenSupported = true

// awaitConnected waits until tc's handshake has ended: the socket turns
// writable once it is established or has failed (SO_ERROR then says how).
func awaitConnected(tc *net.TCPConn) error {
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	err = rc.Write(func(fd uintptr) bool {
		if _, err := syscall.Getpeername(int(fd)); err == nil {
			return true // established: getpeername fails in SYN_SENT
		}
		if e, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil {
			cerr = err
			return true
		} else if e != 0 {
			cerr = syscall.Errno(e)
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	return cerr
}
