// Command images builds lull's container images (lull-controller,
// lull-agent) into _out/ without Docker: `make images`. See
// internal/dev/images.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/images"
)

func main() {
	// The version the agent image is tagged with by default is the one
	// SessionTemplates default to (spec.agent.image).
	registry, version, _ := strings.Cut(lullv1.DefaultAgentImage, ":")
	registry = registry[:strings.LastIndex(registry, "/")]
	o := images.Options{Module: "."}
	flag.StringVar(&o.Out, "out", "_out", "directory the OCI layout (out/oci) and the tarballs (out/<image>.tar) are written to")
	flag.StringVar(&o.Registry, "registry", registry, "repository prefix of the image names")
	flag.StringVar(&o.Version, "version", version, "tag of the images and their org.opencontainers.image.version")
	flag.StringVar(&o.Revision, "revision", "", "VCS revision for org.opencontainers.image.revision (make passes git's HEAD)")
	flag.StringVar(&o.Source, "source", "https://github.com/lull-dev/lull", "repository URL for org.opencontainers.image.source")
	flag.StringVar(&o.Arch, "arch", "", "GOARCH to build for (default: this machine's)")
	flag.StringVar(&o.CABundle, "ca-bundle", images.CABundle, "CA roots file put into the images")
	flag.Parse()
	built, err := images.Build(context.Background(), o, images.Lull)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, b := range built {
		fmt.Printf("%s\t%s\tbinary %.1f MiB, tarball %.1f MiB\n", b.Ref, b.Digest, float64(b.BinaryBytes)/(1<<20), float64(b.TarballBytes)/(1<<20))
	}
	fmt.Printf("OCI layout: %s/oci; tarballs: %s/<image>.tar (docker load -i, ctr image import)\n", o.Out, o.Out)
}
