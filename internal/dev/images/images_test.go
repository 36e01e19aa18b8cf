package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBuildWritesRunnableImages builds lull's images as `make images`
// does, opens the OCI layout and the tarballs, checks each image's config
// (entrypoint, non-root user, labels) and files (the binary and the CA
// roots, no shell), and runs the binary it carries with --version.
func TestBuildWritesRunnableImages(t *testing.T) {
	out := t.TempDir()
	o := Options{Module: "../../..", Out: out, Registry: "ghcr.io/lull-dev", Version: "v0.0.0-test", Revision: "0123abc", Source: "https://example.com/lull"}
	built, err := Build(t.Context(), o, Lull)
	if err != nil {
		t.Fatal(err)
	}
	if len(built) != len(Lull) {
		t.Fatalf("built %d images, want %d", len(built), len(Lull))
	}
	p, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	index, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != len(Lull) {
		t.Fatalf("OCI layout holds %d images, want %d", len(manifest.Manifests), len(Lull))
	}
	for i, im := range Lull {
		desc := manifest.Manifests[i]
		ref := "ghcr.io/lull-dev/" + im.Name + ":v0.0.0-test"
		if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != ref {
			t.Errorf("%s: ref name %q, want %q", im.Name, got, ref)
		}
		img, err := index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.Config
		if !slices.Equal(c.Entrypoint, []string{"/" + im.Name}) || c.User != User || cfg.OS != "linux" {
			t.Errorf("%s: entrypoint %v, user %q, os %q; want [/%s], %q, linux", im.Name, c.Entrypoint, c.User, cfg.OS, im.Name, User)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.source": o.Source, "org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.version": o.Version, "org.opencontainers.image.title": im.Name,
		} {
			if c.Labels[k] != want {
				t.Errorf("%s: label %s = %q, want %q", im.Name, k, c.Labels[k], want)
			}
		}
		files := imageFiles(t, img)
		for _, f := range []string{im.Name, "etc/ssl/certs/ca-certificates.crt"} {
			if _, ok := files[f]; !ok {
				t.Errorf("%s: no /%s in the image (files: %v)", im.Name, f, keys(files))
			}
		}
		for f := range files {
			if f != im.Name && !strings.HasPrefix(f, "etc/ssl/") {
				t.Errorf("%s: unexpected file /%s (a shell or other tools?)", im.Name, f)
			}
		}
		bin := filepath.Join(t.TempDir(), im.Name)
		if err := os.WriteFile(bin, files[im.Name], 0o755); err != nil {
			t.Fatal(err)
		}
		v, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(v), im.Name+" version ") {
			t.Errorf("%s --version from the image: %v, %q", im.Name, err, v)
		}

		// The tarball holds the same image: the same config and layers
		// (its manifest is docker save's, so its digest differs).
		tb, err := tarball.ImageFromPath(filepath.Join(out, im.Name+".tar"), nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tb.ConfigName(); err != nil || got != want {
			t.Errorf("%s: tarball's config %v (%v), the layout's %v", im.Name, got, err, want)
		}
		t.Logf("%s: binary %.1f MiB, tarball %.1f MiB", built[i].Ref, float64(built[i].BinaryBytes)/(1<<20), float64(built[i].TarballBytes)/(1<<20))
	}
}

// imageFiles returns the regular files of an image's layers by path.
func imageFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				files[h.Name] = b
			}
		}
		rc.Close()
	}
	return files
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
