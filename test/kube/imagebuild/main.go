// Command imagebuild writes a container image as a docker-archive tarball
// (what `ctr images import` reads) without a Docker daemon: an empty image,
// one layer of the given files, and a config (entrypoint, user, workdir).
//
//	imagebuild -tag orion.local/orion:dev -out orion.tar \
//	    -entrypoint /orion -user 65532:65532 \
//	    -file bin/orion:/orion:0755 -dir /work:65532 -symlink /bin/sh:busybox
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	var files, dirs, links, env multi
	tag := flag.String("tag", "", "image reference, e.g. orion.local/orion:dev")
	out := flag.String("out", "", "docker-archive tarball to write")
	entry := flag.String("entrypoint", "", "entrypoint, comma-separated")
	cmd := flag.String("cmd", "", "default arguments, comma-separated")
	user := flag.String("user", "", "user[:group]")
	workdir := flag.String("workdir", "", "working directory")
	flag.Var(&files, "file", "SRC:DST:MODE (octal), repeatable")
	flag.Var(&dirs, "dir", "DST[:UID], repeatable (mode 0755, or 1777 for /tmp)")
	flag.Var(&links, "symlink", "DST:TARGET, repeatable")
	flag.Var(&env, "env", "K=V, repeatable")
	flag.Parse()
	if *tag == "" || *out == "" {
		fail(fmt.Errorf("-tag and -out are required"))
	}

	// A fixed time keeps the layer digest a function of the inputs only.
	mtime := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirs {
		p, owner, _ := strings.Cut(d, ":")
		uid := 0
		if owner != "" {
			uid = atoi(owner)
		}
		mode := int64(0o755)
		if p == "/tmp" {
			mode = 0o1777
		}
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime}))
	}
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) != 3 {
			fail(fmt.Errorf("-file %q: want SRC:DST:MODE", f))
		}
		data, err := os.ReadFile(parts[0])
		must(err)
		mode, err := strconv.ParseInt(parts[2], 8, 64)
		must(err)
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(parts[1], "/"), Mode: mode, Size: int64(len(data)), ModTime: mtime}))
		_, err = tw.Write(data)
		must(err)
	}
	for _, l := range links {
		dst, target, ok := strings.Cut(l, ":")
		if !ok {
			fail(fmt.Errorf("-symlink %q: want DST:TARGET", l))
		}
		must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(dst, "/"), Linkname: target, Mode: 0o777, ModTime: mtime}))
	}
	must(tw.Close())
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	must(err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	must(err)
	cf, err := img.ConfigFile()
	must(err)
	cf = cf.DeepCopy()
	cf.Architecture = "amd64"
	cf.OS = "linux"
	cf.Created = v1.Time{Time: mtime}
	cf.Config.Entrypoint = split(*entry)
	cf.Config.Cmd = split(*cmd)
	cf.Config.User = *user
	cf.Config.WorkingDir = *workdir
	cf.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)
	img, err = mutate.ConfigFile(img, cf)
	must(err)
	ref, err := name.ParseReference(*tag)
	must(err)
	must(tarball.WriteToFile(*out, ref, img))
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	must(err)
	return n
}

func must(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "imagebuild:", err)
	os.Exit(1)
}
