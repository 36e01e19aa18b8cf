package devcluster

import (
	"io"
	"net"
	"strconv"
	"sync"
)

// serviceForward carries the pods' connections to the kubernetes Service
// (serviceIP:443, the address the kubelet gives every pod in
// KUBERNETES_SERVICE_HOST/PORT) to the API server on loopback: a
// kube-proxy for that one Service. The API server's serving certificate
// names serviceIP, so TLS is passed through untouched.
type serviceForward struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

// listenServiceForward listens on serviceIP:443 (which must be on lo, see
// addServiceAddress) and forwards each connection to target (host:port).
func listenServiceForward(target string) (*serviceForward, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(serviceIP, strconv.Itoa(443)))
	if err != nil {
		return nil, err
	}
	f := &serviceForward{ln: ln, target: target, conns: map[net.Conn]bool{}}
	f.wg.Go(f.accept)
	return f, nil
}

func (f *serviceForward) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.wg.Go(func() { f.pipe(c) })
	}
}

// pipe copies both ways until either side closes.
func (f *serviceForward) pipe(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	defer up.Close()
	if !f.track(c, up) {
		return
	}
	defer f.untrack(c, up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (f *serviceForward) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return false // closing
	}
	for _, c := range cs {
		f.conns[c] = true
	}
	return true
}

func (f *serviceForward) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

// close stops listening, closes every forwarded connection and waits.
func (f *serviceForward) close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}
