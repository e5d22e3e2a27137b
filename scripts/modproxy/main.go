// Command modproxy writes a file-based Go module proxy that serves every
// module of a fencelock checkout at one version (v0.1.0 unless -version
// says otherwise), made from the working tree: the files git tracks or
// would track (git ls-files --cached --others --exclude-standard), so that
// build products and other ignored files stay out.
//
// fencelock's modules require each other at a version not published yet;
// development builds them together through go.work, but "go mod tidy" runs
// per module with GOWORK=off and must resolve those requirements somewhere.
// scripts/check.sh points GOPROXY at this directory (then at the module
// cache, for everything else), so that tidy runs without the network:
//
//	go run ./scripts/modproxy -root . -out /tmp/proxy
//	GOWORK=off GOPROXY=file:///tmp/proxy,file://$(go env GOMODCACHE)/cache/download go mod tidy -diff
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func main() {
	root := flag.String("root", ".", "the checkout's root directory")
	out := flag.String("out", "", "the directory to write the proxy to (required)")
	version := flag.String("version", "v0.1.0", "the version every module is served at")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -out DIR [-root DIR] [-version v0.1.0]")
		os.Exit(2)
	}
	mods, err := write(*root, *out, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
	for _, m := range mods {
		fmt.Printf("%s %s\n", m, *version)
	}
}

// write serves every module under root at version in out, and returns the
// modules' paths.
func write(root, out, version string) ([]string, error) {
	files, err := gitFiles(root)
	if err != nil {
		return nil, err
	}
	var mods []string
	for _, f := range files {
		if path.Base(f) != "go.mod" || strings.Contains("/"+f, "/testdata/") {
			continue
		}
		dir := path.Dir(f)
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		modPath := modfile.ModulePath(data)
		if modPath == "" {
			return nil, fmt.Errorf("%s: no module line", f)
		}
		if err := serve(root, out, dir, modPath, version, data, files); err != nil {
			return nil, fmt.Errorf("%s: %w", modPath, err)
		}
		mods = append(mods, modPath)
	}
	return mods, nil
}

// serve writes the list, .info, .mod and .zip files of the module at dir
// (relative to root; "." for the root module).
func serve(root, out, dir, modPath, version string, gomod []byte, files []string) error {
	escaped, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	// The module's files: those under dir. zip.Create leaves out those of
	// nested modules (a directory with a go.mod of its own) and vendor
	// directories, as the go command does.
	var zfiles []zip.File
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	for _, f := range files {
		if strings.HasPrefix(f, prefix) {
			zfiles = append(zfiles, file{root: root, name: f, rel: strings.TrimPrefix(f, prefix)})
		}
	}
	var buf bytes.Buffer
	if err := zip.Create(&buf, module.Version{Path: modPath, Version: version}, zfiles); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(vdir, version+".zip"), buf.Bytes(), 0o644)
}

// gitFiles lists the files git tracks or would track under root, with
// slash-separated paths relative to it; a file deleted from the working
// tree but still tracked is left out.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	seen := map[string]bool{}
	for f := range strings.SplitSeq(string(outb), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		if fi, err := os.Lstat(filepath.Join(root, f)); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, f)
	}
	return files, nil
}

// file is a zip.File from the working tree.
type file struct {
	root, name, rel string
}

func (f file) Path() string                 { return f.rel }
func (f file) Lstat() (fs.FileInfo, error)  { return os.Lstat(filepath.Join(f.root, f.name)) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(filepath.Join(f.root, f.name)) }
