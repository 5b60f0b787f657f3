package baton

import "syscall"

// tcpFastOpenConnect is TCP_FASTOPEN_CONNECT (Linux 4.11): connect returns
// at once, and the first write goes out in the SYN when the kernel has a
// cookie for the server (the first connection to a server fetches one with
// an ordinary handshake).
const tcpFastOpenConnect = 30

func setFastOpenConnect(fd uintptr) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpFastOpenConnect, 1)
}

const fastOpenSupported = true
