package devcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// Versions of the cached binaries. They must match hack/build-tools.sh.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.6.8"
	KwokVersion       = "v0.8.0"
)

// Binaries holds the paths of the control plane's binaries and of KWOK's
// stage directory (kwok's kustomize/stage tree).
type Binaries struct {
	APIServer, ControllerManager, Scheduler, Etcd, Kwok, KwokStages string
	// Kubelet is checked only for a real node (CheckRealNodeHost).
	Kubelet string
}

// CacheDir returns the directory hack/build-tools.sh builds into:
// ${LULL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lull}/bin.
func CacheDir() string {
	if d := os.Getenv("LULL_CACHE_DIR"); d != "" {
		return filepath.Join(d, "bin")
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "lull", "bin")
}

// binariesIn returns the expected layout under bin.
func binariesIn(bin string) Binaries {
	k8s := filepath.Join(bin, "kubernetes-"+KubernetesVersion)
	kwok := filepath.Join(bin, "kwok-"+KwokVersion)
	return Binaries{
		APIServer:         filepath.Join(k8s, "kube-apiserver"),
		ControllerManager: filepath.Join(k8s, "kube-controller-manager"),
		Scheduler:         filepath.Join(k8s, "kube-scheduler"),
		Kubelet:           filepath.Join(k8s, "kubelet"),
		Etcd:              filepath.Join(bin, "etcd-"+EtcdVersion, "etcd"),
		Kwok:              filepath.Join(kwok, "kwok"),
		KwokStages:        filepath.Join(kwok, "stage"),
	}
}

// verified caches binaries whose `--version` already succeeded in this
// process, keyed by path.
var verified sync.Map

// FindBinaries locates the cached binaries and checks that each one runs
// (`--version`). The error says to run `make tools` when one is missing or
// broken.
func FindBinaries() (Binaries, error) {
	b := binariesIn(CacheDir())
	var errs []error
	for _, p := range []string{b.Etcd, b.APIServer, b.ControllerManager, b.Scheduler, b.Kwok} {
		if err := checkRuns(p); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(filepath.Join(b.KwokStages, "node", "fast", "node-initialize.yaml")); err != nil {
		errs = append(errs, fmt.Errorf("kwok stages missing: %w", err))
	}
	if len(errs) > 0 {
		return b, fmt.Errorf("devcluster: local control plane binaries not usable (run `make tools`, which runs hack/build-tools.sh, to build them into %s): %w",
			CacheDir(), errors.Join(errs...))
	}
	return b, nil
}

// checkRuns runs path --version.
func checkRuns(path string) error {
	if _, ok := verified.Load(path); ok {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w: %.200s", path, err, out)
	}
	verified.Store(path, true)
	return nil
}

// EnvtestAssets returns a directory holding kube-apiserver, etcd (and
// kubectl if /usr/bin/kubectl exists) as symlinks to the cached binaries,
// creating it if needed. Point controller-runtime envtest's
// BinaryAssetsDirectory at it.
func EnvtestAssets() (string, error) {
	b, err := FindBinaries()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(CacheDir(), "envtest-"+KubernetesVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("devcluster: envtest assets: %w", err)
	}
	links := map[string]string{"kube-apiserver": b.APIServer, "etcd": b.Etcd}
	if _, err := os.Stat("/usr/bin/kubectl"); err == nil {
		links["kubectl"] = "/usr/bin/kubectl"
	}
	for name, target := range links {
		if err := symlink(target, filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("devcluster: envtest assets: %w", err)
		}
	}
	return dir, nil
}

// symlink makes link point at target, replacing it atomically if it points
// elsewhere, so concurrent callers never see a missing link.
func symlink(target, link string) error {
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	tmp := fmt.Sprintf("%s.tmp%d-%d", link, os.Getpid(), rand.Uint64())
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}
