package devcluster

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// containsAll fails t for each of wants that msg lacks.
func containsAll(t *testing.T, what, msg string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: %q does not name %q", what, msg, w)
		}
	}
}

// A machine that cannot run the real node is refused with the first thing
// it lacks and the one command that fixes it, before anything is asked of
// it further (so before anything of it changes), and the refusal matches
// ErrRealNodeRefused: lull dev keeps no state dir for it.
func TestRealNodeHostRefusalNamesTheCauseAndTheFix(t *testing.T) {
	found := func(string) (string, error) { return "/usr/bin/x", nil }
	ok := func() error { return nil }
	good := realNodeHost{goos: "linux", euid: 0, cgroups: ok, lookPath: found, kubelet: ok}
	if err := checkRealNodeHost(good); err != nil {
		t.Fatalf("a machine with everything refused: %v", err)
	}
	asked := func(t *testing.T) realNodeHost {
		h := good
		h.cgroups = func() error { t.Error("cgroups looked at after a refusal"); return nil }
		h.lookPath = func(string) (string, error) { t.Error("commands looked up after a refusal"); return "", nil }
		h.kubelet = func() error { t.Error("kubelet run after a refusal"); return nil }
		return h
	}
	for _, tc := range []struct {
		name  string
		host  func(t *testing.T) realNodeHost
		wants []string
	}{
		{"not Linux", func(t *testing.T) realNodeHost { h := asked(t); h.goos = "darwin"; return h },
			[]string{"Linux only", "darwin", "without --real-node"}},
		{"not root", func(t *testing.T) realNodeHost { h := asked(t); h.euid = 1000; return h },
			[]string{"needs root", "uid 1000", `sudo -E env "PATH=$PATH" bin/lull dev --real-node`, "make test"}},
		{"no cgroups", func(t *testing.T) realNodeHost {
			h := asked(t)
			h.cgroups = func() error { return os.ErrNotExist }
			return h
		}, []string{"cgroups", "/sys/fs/cgroup", "mount -t cgroup2 none /sys/fs/cgroup"}},
		{"packages missing", func(t *testing.T) realNodeHost {
			h := good
			h.lookPath = func(p string) (string, error) {
				if p == "runc" || p == "/usr/lib/cni/bridge" {
					return "", errors.New("not found")
				}
				return p, nil
			}
			h.kubelet = func() error { t.Error("kubelet run after a refusal"); return nil }
			return h
		}, []string{"runc (runc)", "/usr/lib/cni/bridge (containernetworking-plugins)", "`apt-get install -y containerd runc containernetworking-plugins`"}},
		{"no kubelet", func(*testing.T) realNodeHost {
			h := good
			h.kubelet = func() error { return errors.New("stat kubelet: no such file") }
			return h
		}, []string{"kubelet", "no such file", "`make tools`"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRealNodeHost(tc.host(t))
			if err == nil {
				t.Fatal("not refused")
			}
			if !errors.Is(err, ErrRealNodeRefused) {
				t.Errorf("%v does not match ErrRealNodeRefused", err)
			}
			containsAll(t, tc.name, err.Error(), tc.wants...)
		})
	}
}

// A hostname that does not resolve (the API server dials the node by it)
// is refused with the /etc/hosts line that fixes it.
func TestUnresolvableHostnameNamesTheHostsLine(t *testing.T) {
	fail := func(string) ([]string, error) { return nil, &net.DNSError{Err: "no such host", IsNotFound: true} }
	_, err := resolvableNodeName("Box-1", fail)
	if err == nil {
		t.Fatal("an unresolvable hostname accepted")
	}
	containsAll(t, "unresolvable hostname", err.Error(), `"box-1"`, "127.0.0.1 box-1", "/etc/hosts")
	name, err := resolvableNodeName("Box-1", func(string) ([]string, error) { return []string{"127.0.1.1"}, nil })
	if err != nil || name != "box-1" {
		t.Errorf("a resolvable hostname: %q, %v; want box-1", name, err)
	}
}

// What a crashed run left is named with that run when the next start
// removes it (nothing for the user to do), and, when it cannot be removed,
// with why and what to do: stop what holds it, then start again.
func TestLeftoversOfACrashedRunAreNamedRemovedOrNot(t *testing.T) {
	prev := machineHolder{PID: "4242", StateDir: "/tmp/lull-dev-1"}
	left := hostLeftovers{processes: []int{7}, mounts: []string{"/var/lib/kubelet"}, links: []string{nodeBridge}, svcAddr: true}
	containsAll(t, "removed", leftoversRemoved(prev, left),
		"removed", "earlier run", "pid 4242", "state dir /tmp/lull-dev-1", "1 processes (7)", "1 mounts (/var/lib/kubelet)", "1 network links (lull0)", serviceIP+"/32 on lo")
	containsAll(t, "removed, no record", leftoversRemoved(machineHolder{}, left), "pid unknown", "state dir unknown")

	err := leftoversNotRemoved(prev, left, errors.New("not removing /var/lib/kubelet: /var/lib/kubelet/pods/x is still mounted"))
	containsAll(t, "not removed", err.Error(),
		"pid 4242", "1 mounts (/var/lib/kubelet)", "/var/lib/kubelet/pods/x is still mounted", "stop what still holds them", "start again", RealNodeAsRoot)
}

// The node's containerd socket with no record of a lull real node since
// boot is another containerd's: refused, named with the command that
// removes it if it is a leftover, and left where it is.
func TestAForeignNodeSocketIsRefusedNamedAndLeft(t *testing.T) {
	dir := t.TempDir()
	p := hostPaths{systemSocket: filepath.Join(dir, "system.sock"), nodeSocket: filepath.Join(dir, "run", "node.sock"), kubeletRoot: filepath.Join(dir, "kubelet")}
	if err := os.MkdirAll(filepath.Dir(p.nodeSocket), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.nodeSocket, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := checkNotForeign(machineHolder{}, p)
	if err == nil {
		t.Fatal("a foreign node socket accepted")
	}
	containsAll(t, "foreign node socket", err.Error(), p.nodeSocket, "does not touch it", "rm -rf "+filepath.Dir(p.nodeSocket))
	if _, serr := os.Stat(p.nodeSocket); serr != nil {
		t.Errorf("the refused socket was touched: %v", serr)
	}
	if err := checkNotForeign(machineHolder{PID: "1", StateDir: "/tmp/st"}, p); err != nil {
		t.Errorf("a crashed lull real node's socket refused: %v", err)
	}
}

// The one fixed port the real node needs, the kubernetes Service's 443,
// taken by another program is named with the command that finds it; every
// other port is a free one picked at start.
func TestServiceAddressTakenNamesWhatToStop(t *testing.T) {
	inUse := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	err := serviceForwardError(inUse)
	containsAll(t, "port 443 taken", err.Error(), serviceIP+":443", "port 443", "ss -ltnp 'sport = :443'", "without --real-node", "address already in use")
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("%v does not keep its cause", err)
	}
	other := serviceForwardError(errors.New("cannot assign requested address"))
	containsAll(t, "other listen error", other.Error(), serviceIP+":443", "cannot assign requested address")
}

// An image the node could not import is named with its tarball, ctr's
// output and the fix: a full disk under containerd's root is named with
// that root; otherwise the tarball is built again by starting again.
func TestImageThatFailedToImportNamesTheImageAndTheRebuild(t *testing.T) {
	im := NodeImage{Tarball: "/tmp/lull-images-1/example-runtime.tar", Ref: "ghcr.io/lull-dev/example-runtime:v0.1.0"}
	corrupt := importFailed(im, "ctr: unexpected EOF", errors.New("ctr images import: exit status 1: ctr: unexpected EOF"), "/tmp/st/real-node/containerd/root")
	containsAll(t, "corrupt archive", corrupt.Error(), im.Ref, im.Tarball, "unexpected EOF", "start again", "make images")

	full := importFailed(im, "write /tmp/st/x: no space left on device", errors.New("ctr images import: exit status 1"), "/tmp/st/real-node/containerd/root")
	containsAll(t, "full disk", full.Error(), im.Ref, "full", "df -h /tmp/st/real-node/containerd/root")

	missing := imageMissing(im, os.ErrNotExist)
	containsAll(t, "missing tarball", missing.Error(), im.Ref, "missing", "start again")
	if !errors.Is(missing, os.ErrNotExist) {
		t.Errorf("%v does not keep its cause", missing)
	}

	other := imageNotInArchive(im, []string{"ghcr.io/lull-dev/example-runtime:v0.0.9"})
	containsAll(t, "other reference", other.Error(), im.Ref, im.Tarball, "v0.0.9", "start again")
}

// A start refused for foreign host paths leaves the machine lock's record
// as it was: a record of its own would tell the next start that a lull
// real node ran, and that start would remove the foreign kubelet root as
// a crashed run's leftover.
func TestARefusedStartLeavesNoRecordThatMakesForeignPathsLeftovers(t *testing.T) {
	old := machineLockPath
	machineLockPath = filepath.Join(t.TempDir(), "real-node.lock")
	t.Cleanup(func() { machineLockPath = old })
	dir := t.TempDir()
	p := hostPaths{systemSocket: filepath.Join(dir, "system.sock"), nodeSocket: filepath.Join(dir, "node.sock"), kubeletRoot: filepath.Join(dir, "kubelet")}
	if err := os.Mkdir(p.kubeletRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(prev machineHolder) error { return checkNotForeign(prev, p) }
	for attempt := 1; attempt <= 2; attempt++ {
		f, prev, err := lockMachine("/tmp/state-a", check)
		if err == nil {
			f.Close()
			t.Fatalf("attempt %d: a foreign kubelet root accepted (previous record %+v)", attempt, prev)
		}
		containsAll(t, "foreign kubelet root", err.Error(), p.kubeletRoot, "rm -rf")
	}
	if _, err := os.Stat(p.kubeletRoot); err != nil {
		t.Errorf("the foreign kubelet root was touched: %v", err)
	}
	if f, prev, err := lockMachine("/tmp/state-b", nil); err != nil || prev != (machineHolder{}) {
		t.Errorf("after two refusals the lock records %+v (%v), want no record", prev, err)
	} else {
		f.Close()
	}
}
