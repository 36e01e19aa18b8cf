package images

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestBuildIsReproducible: the same tree built twice gives the same image
// digests (every file and the image dated at the epoch, -trimpath), so a
// digest in a SessionTemplate or a catalog names one build. Each binary is
// static (no ELF interpreter, no shared library), as an image with nothing
// but the binary and the CA roots needs.
func TestBuildIsReproducible(t *testing.T) {
	o := Options{Module: "../../..", Registry: "ghcr.io/lull-dev", Version: "v0.0.0-test", Revision: "0123abc", Source: "https://example.com/lull"}
	o.Out = t.TempDir()
	first, err := Build(t.Context(), o, Lull)
	if err != nil {
		t.Fatal(err)
	}
	o.Out = t.TempDir()
	second, err := Build(t.Context(), o, Lull)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Digest != second[i].Digest {
			t.Errorf("%s: digest %s, then %s from the same tree", first[i].Ref, first[i].Digest, second[i].Digest)
		}
		tb, err := os.ReadFile(filepath.Join(o.Out, Lull[i].Name+".tar"))
		if err != nil || len(tb) == 0 {
			t.Fatalf("%s.tar: %v", Lull[i].Name, err)
		}
	}
	for _, im := range Lull {
		bin, err := goBuild(t.Context(), Options{Module: "../../..", Arch: runtime.GOARCH}, im)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: not an ELF binary: %v", im.Name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: has an ELF interpreter: not static", im.Name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s: links shared libraries %v: not static", im.Name, libs)
		}
	}
}
