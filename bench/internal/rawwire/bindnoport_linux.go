package rawwire

import "syscall"

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT (linux/in.h), which the
// syscall package lacks.
const ipBindAddressNoPort = 24

// bindNoPort leaves the choice of the local port of a dial from a given
// address to connect, which needs only the four addresses of the
// connection to be unique, instead of bind, which needs the port free on
// that address: tens of thousands of earlier connections from
// 127.0.0.1 in TIME_WAIT (to any server) then no longer fail the bind
// with "address already in use".
func bindNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	}); err != nil {
		return err
	}
	return serr
}
