package devcluster

import (
	"fmt"
	"net"
	"strings"
	"sync"
)

// portAttempts is how many times a component that lost a port race is
// started.
const portAttempts = 3

// handedOut remembers every port freePorts returned in this process, so two
// clusters started at once never get the same port even though each
// listener is closed before the component binds it.
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}

	// portHook, when set (by tests), may replace the ports freePorts
	// returns, e.g. with one already taken.
	portHook func([]int) []int
)

// freePorts returns n distinct free TCP ports on 127.0.0.1. Another process
// may still take one before the component binds it; components detect that
// ("address already in use") and are restarted on new ports.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	var open []net.Listener
	defer func() {
		for _, l := range open {
			l.Close()
		}
	}()
	for len(ports) < n {
		if len(open) > n+100 {
			return nil, fmt.Errorf("no free loopback ports")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		open = append(open, l) // held open so the kernel does not repeat it
		port := l.Addr().(*net.TCPAddr).Port
		if handedOut[port] {
			continue
		}
		handedOut[port] = true
		ports = append(ports, port)
	}
	if portHook != nil {
		ports = portHook(ports)
	}
	return ports, nil
}

// addrInUse reports whether a component's log says it lost a port race.
func addrInUse(logPath string) bool {
	return strings.Contains(logTail(logPath, 40), "address already in use")
}
