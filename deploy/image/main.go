// Command image builds the container image of baton serve as an OCI image
// layout, without a container daemon, reproducibly: the same commit and Go
// version give the same bytes and so the same digest.
//
//	cd deploy/image && go run . -o ../../dist/image [-platform linux/amd64] [-version V] [-docker-tar FILE]
//
// The image holds one layer: the static binary (CGO_ENABLED=0, built here
// as scripts/dist.sh builds it), /etc/passwd and /etc/group naming the
// non-root user baton (65532), /data owned by it (the data directory, a
// volume), and LICENSE, NOTICE and the licence texts of every module linked
// into the binary under /usr/share/doc/baton. No shell, no package
// manager, no libc. Every file's time is the commit's (SOURCE_DATE_EPOCH
// overrides it), its owner fixed, its order sorted.
//
// It is a module of its own so that the server's build gains nothing of
// go-containerregistry, the library that writes the layout (the one ko and
// crane are built on: it makes image manifests and layouts in Go, with no
// daemon and no tool to install beyond Go).
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
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

// The image's user, its ports and its data directory.
const (
	uid, gid = 65532, 65532
	userName = "baton"
	dataDir  = "/data"
	binPath  = "/usr/local/bin/baton"
	docDir   = "/usr/share/doc/baton"
)

// Ports: the lock protocol, the ops API, and Raft in a cluster (the Helm
// chart's -raft-addr).
var ports = []string{"7070/tcp", "7071/tcp", "7072/tcp"}

// labels are the image's OCI annotations (org.opencontainers.image.*);
// the version and revision are added per build.
var labels = map[string]string{
	"org.opencontainers.image.title":         "baton",
	"org.opencontainers.image.description":   "Baton named-lock server (baton serve)",
	"org.opencontainers.image.licenses":      "Apache-2.0",
	"org.opencontainers.image.source":        "https://github.com/batonlock/baton",
	"org.opencontainers.image.documentation": "https://github.com/batonlock/baton/blob/main/docs/operations.md",
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fset.String("o", "", "`dir` to write the OCI image layout to (replaced)")
	platform := fset.String("platform", "linux/amd64", "`os/arch` of the image (linux only)")
	version := fset.String("version", "", "version stamped into the binary and the tag (default: git describe)")
	repo := fset.String("repo", "", "the repository's top `folder` (default: found above the working directory)")
	dockerTar := fset.String("docker-tar", "", "also write the image as a `file` for docker load / podman load")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *out == "" || fset.NArg() != 0 {
		return errors.New("usage: image -o DIR [-platform linux/amd64] [-version V] [-docker-tar FILE]")
	}
	goos, goarch, ok := strings.Cut(*platform, "/")
	if !ok || goos != "linux" || goarch == "" {
		return fmt.Errorf("platform %q: want linux/ARCH", *platform)
	}
	root := *repo
	if root == "" {
		var err error
		if root, err = findRepo(); err != nil {
			return err
		}
	}
	commit, when, dirty, err := revision(root)
	if err != nil {
		return err
	}
	if *version == "" {
		*version = describe(root)
	}

	stage, err := os.MkdirTemp("", "baton-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	bin := filepath.Join(stage, "baton")
	if err := buildBinary(root, bin, goos, goarch, *version, commit); err != nil {
		return err
	}
	lic := filepath.Join(stage, "licenses")
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "licenses.sh"), lic, *platform)
	cmd.Dir, cmd.Stderr = root, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/licenses.sh: %w", err)
	}

	layer, err := layerTar(root, bin, lic, when)
	if err != nil {
		return err
	}
	img, err := image(layer, goarch, *version, commit, when)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	tag := "baton:" + tagSafe(*version)
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	p, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tagSafe(*version)})); err != nil {
		return err
	}
	if *dockerTar != "" {
		ref, err := name.NewTag(tag)
		if err != nil {
			return err
		}
		if err := tarball.WriteToFile(*dockerTar, ref, img); err != nil {
			return err
		}
	}
	note := ""
	if dirty {
		note = " (uncommitted changes: not the commit's digest)"
	}
	fmt.Fprintf(stdout, "image: %s %s %s in %s, tag %s%s\n", digest, *platform, tag, *out, tagSafe(*version), note)
	return nil
}

// findRepo walks up from the working directory to the root module.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/batonlock/baton\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no github.com/batonlock/baton module above the working directory: give -repo")
		}
		dir = parent
	}
}

// revision is the commit, its time (or SOURCE_DATE_EPOCH), and whether the
// work tree has changes.
func revision(root string) (commit string, when time.Time, dirty bool, err error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	commit, err = git("rev-parse", "--short=12", "HEAD")
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("git rev-parse: %w", err)
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git("log", "-1", "--format=%ct"); err != nil {
			return "", time.Time{}, false, fmt.Errorf("git log: %w", err)
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("source date %q: %w", epoch, err)
	}
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("git status: %w", err)
	}
	return commit, time.Unix(secs, 0).UTC(), status != "", nil
}

func describe(root string) string {
	cmd := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

// tagSafe makes v a valid image tag ([A-Za-z0-9_.-], at most 128).
func tagSafe(v string) string {
	b := []byte(v)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	return string(b)
}

// buildBinary builds the static binary as scripts/dist.sh does.
func buildBinary(root, out, goos, goarch, version, commit string) error {
	pkg := "github.com/batonlock/baton/internal/cli"
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", fmt.Sprintf("-s -w -buildid= -X %s.buildVersion=%s -X %s.buildCommit=%s", pkg, version, pkg, commit),
		"-o", out, "./cmd/baton")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/baton for %s/%s: %w", goos, goarch, err)
	}
	return nil
}

// entry is one file or folder of the layer.
type entry struct {
	path     string // without a leading /
	mode     int64
	uid, gid int
	data     []byte // nil for a folder
}

// layerTar is the layer's uncompressed tar: sorted, times fixed to when,
// owners numeric.
func layerTar(root, bin, lic string, when time.Time) ([]byte, error) {
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var entries []entry
	dirs := map[string]bool{}
	addDirs := func(p string, uid, gid int) {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, entry{path: d, mode: 0o755, uid: uid, gid: gid})
			}
		}
	}
	file := func(p string, mode int64, data []byte) {
		addDirs(p, 0, 0)
		entries = append(entries, entry{path: p, mode: mode, data: data})
	}
	file(strings.TrimPrefix(binPath, "/"), 0o755, binary)
	file("etc/passwd", 0o644, []byte(fmt.Sprintf("root:x:0:0:root:/root:/nonexistent\n%s:x:%d:%d:%s:%s:/nonexistent\n", userName, uid, gid, userName, dataDir)))
	file("etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, gid)))
	for _, f := range []string{"LICENSE", "NOTICE"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		file(strings.TrimPrefix(docDir, "/")+"/"+f, 0o644, b)
	}
	err = filepath.WalkDir(lic, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(lic, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		file(strings.TrimPrefix(docDir, "/")+"/licenses/"+filepath.ToSlash(rel), 0o644, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The data directory: the user's own, closed to others.
	entries = append(entries, entry{path: strings.TrimPrefix(dataDir, "/"), mode: 0o700, uid: uid, gid: gid})
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: when, Format: tar.FormatPAX}
		if e.data == nil {
			h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// image is the OCI image of the layer: config, one layer, fixed times.
func image(layerBytes []byte, goarch, version, commit string, when time.Time) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	anns := map[string]string{"org.opencontainers.image.version": version, "org.opencontainers.image.revision": commit,
		"org.opencontainers.image.created": when.Format(time.RFC3339)}
	for k, v := range labels {
		anns[k] = v
	}
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	cfg := &v1.ConfigFile{
		Architecture: goarch,
		OS:           "linux",
		Created:      v1.Time{Time: when},
		Config: v1.Config{
			User:       fmt.Sprintf("%d:%d", uid, gid),
			Entrypoint: []string{binPath},
			Cmd:        []string{"serve"},
			// Listen on every interface, the data in the volume; an ops
			// port off loopback needs BATON_ADMIN_TOKEN_FILE (a mounted
			// secret), or the server refuses to start.
			Env:          []string{"BATON_DATA_DIR=" + dataDir, "BATON_ADDR=0.0.0.0:7070", "BATON_OPS_ADDR=0.0.0.0:7071"},
			ExposedPorts: exposed,
			Volumes:      map[string]struct{}{dataDir: {}},
			WorkingDir:   dataDir,
			Labels:       anns,
			StopSignal:   "SIGTERM",
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: when},
		CreatedBy: "deploy/image " + version,
		Comment:   "baton serve, static; user baton; LICENSE, NOTICE and licences in " + docDir,
	}})
	if err != nil {
		return nil, err
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: when})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, anns).(v1.Image), nil
}
