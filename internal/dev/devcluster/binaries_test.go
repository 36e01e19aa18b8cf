package devcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindBinariesMissingSaysMakeTools(t *testing.T) {
	t.Setenv("LULL_CACHE_DIR", t.TempDir())
	_, err := FindBinaries()
	if err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("FindBinaries in an empty cache: %v, want an error saying to run make tools", err)
	}
	if _, err := Start(t.Context(), Options{StateDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("Start in an empty cache: %v", err)
	}
}

func TestEnvtestAssets(t *testing.T) {
	dir, err := EnvtestAssets()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"kube-apiserver", "etcd"}
	if _, err := os.Stat("/usr/bin/kubectl"); err == nil {
		names = append(names, "kubectl")
	}
	for _, name := range names {
		if err := checkRuns(filepath.Join(dir, name)); err != nil && name != "kubectl" {
			t.Error(err)
		} else if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if again, err := EnvtestAssets(); err != nil || again != dir {
		t.Fatalf("second EnvtestAssets: %q, %v", again, err)
	}
}
