// Package images builds lull's container images without Docker: each is
// one static Go binary, the CA roots and nothing else (no shell, no
// package manager), run as a non-root user, written as an OCI image layout
// and as a tarball `docker load` and `ctr import` take. It uses
// go-containerregistry (github.com/google/go-containerregistry), the
// library ko and crane are built on.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is one of lull's images: the binary built from Package, at
// /<Name> in the image and its entrypoint.
type Image struct {
	Name    string // e.g. "lull-controller": the binary, the repository's last element
	Package string // the main package, e.g. "./cmd/lull-controller"
	Title   string // org.opencontainers.image.title's description
}

// Lull is every image lull ships: the controller and the lull agent, the
// drain sidecar.
var Lull = []Image{
	{Name: "lull-controller", Package: "./cmd/lull-controller", Title: "lull controller manager"},
	{Name: "lull-agent", Package: "./cmd/lull-agent", Title: "lull agent, the drain sidecar"},
}

// RealNode are the images the local environment's real node runs beside
// Lull's (docs/real-node.md): the reference runtime, and the sandbox image
// containerd starts every pod with (no registry here serves the
// kubelet's pause image).
var RealNode = []Image{
	{Name: "example-runtime", Package: "./cmd/example-runtime", Title: "lull reference session runtime"},
	{Name: "pause", Package: "./internal/dev/images/pause", Title: "sandbox of the local environment's real node"},
}

// User is the image's user, numeric so that no /etc/passwd is needed and
// runAsNonRoot can verify it (65532, distroless's nonroot).
const User = "65532:65532"

// CABundle is where the CA roots are, on the build machine and in the
// image: Go's crypto/x509 reads this path on Linux.
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// Options says what to build and where.
type Options struct {
	// Module is the root of lull's module (where go.mod is); Out the
	// directory the images go to: Out/oci (one OCI layout holding every
	// image, each named by its org.opencontainers.image.ref.name) and
	// Out/<name>.tar.
	Module, Out string
	// Registry is the repositories' prefix, e.g. "ghcr.io/lull-dev"; the
	// images are tagged <Registry>/<name>:<Version>.
	Registry, Version string
	// Revision and Source go into the OCI labels (the VCS revision and the
	// repository's URL).
	Revision, Source string
	// Arch is the GOARCH built for; empty means this machine's.
	Arch string
	// CABundle is the CA roots file put into the image; empty means the
	// build machine's (CABundle).
	CABundle string
}

// Built is one image written: its reference and digest, and the sizes of
// its binary and of the tarball, bytes.
type Built struct {
	Ref                       string
	Digest                    v1.Hash
	BinaryBytes, TarballBytes int64
}

// Build builds every image of images into o.Out. It fails naming the step
// (the go build, the CA bundle, a write) and leaves what it wrote so far.
func Build(ctx context.Context, o Options, images []Image) ([]Built, error) {
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.CABundle == "" {
		o.CABundle = CABundle
	}
	roots, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA roots for the images: %w (install ca-certificates, or pass the bundle's path)", err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	ociDir := filepath.Join(o.Out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return nil, err
	}
	p, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", ociDir, err)
	}
	var out []Built
	for _, im := range images {
		bin, err := goBuild(ctx, o, im)
		if err != nil {
			return out, err
		}
		img, err := assemble(o, im, bin, roots)
		if err != nil {
			return out, fmt.Errorf("image %s: %w", im.Name, err)
		}
		ref, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.Registry, im.Name, o.Version))
		if err != nil {
			return out, fmt.Errorf("image %s: tag: %w", im.Name, err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref.String()}),
			layout.WithPlatform(v1.Platform{OS: "linux", Architecture: o.Arch})); err != nil {
			return out, fmt.Errorf("image %s: OCI layout: %w", im.Name, err)
		}
		tarPath := filepath.Join(o.Out, im.Name+".tar")
		if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
			return out, fmt.Errorf("image %s: tarball: %w", im.Name, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return out, err
		}
		fi, err := os.Stat(tarPath)
		if err != nil {
			return out, err
		}
		out = append(out, Built{Ref: ref.String(), Digest: digest, BinaryBytes: int64(len(bin)), TarballBytes: fi.Size()})
	}
	return out, nil
}

// goBuild builds im's binary static for linux/o.Arch, without symbol
// tables or local paths (-trimpath), and returns it.
func goBuild(ctx context.Context, o Options, im Image) ([]byte, error) {
	dir, err := os.MkdirTemp("", "lull-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, im.Name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, im.Package)
	cmd.Dir = o.Module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", im.Package, err, out)
	}
	return os.ReadFile(bin)
}

// epoch is every file's and the image's time, so the same binary gives
// the same image digest.
var epoch = time.Unix(0, 0).UTC()

// assemble makes the image: one layer with the binary and the CA roots,
// and a config naming the entrypoint, the user and the labels.
func assemble(o Options, im Image, bin, roots []byte) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		path string
		mode int64
		data []byte
	}{{strings.TrimPrefix(CABundle, "/"), 0o644, roots}, {im.Name, 0o755, bin}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", o.Arch
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{"/" + im.Name}
	cfg.Config.User = User
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=" + CABundle}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       im.Name,
		"org.opencontainers.image.description": im.Title,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.version":     o.Version,
	}
	return mutate.ConfigFile(img, cfg)
}
