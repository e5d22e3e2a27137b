// Command modproxy writes a file-based Go module proxy that serves every
// module of a fencelock checkout at one version (v0.1.0 unless -version
// says otherwise), made from the working tree: the files git tracks or
// would track (git ls-files --cached --others --exclude-standard), so that
// build products and other ignored files stay out.
//
// The zips are made as a public proxy makes them from a tagged release:
// the files are committed to a temporary repository of their own, each
// module is tagged there as a release would be (v0.1.0 for the root module,
// etcdbackend/v0.1.0 for the one in etcdbackend/, ...), and each zip is
// golang.org/x/mod/zip's CreateFromVCS of its tag, which is the go
// command's own way (git archive of the module's directory at the tag,
// nested modules and vendor directories left out, .gitattributes'
// export-ignore honoured, and the repository root's LICENSE added to a
// module in a subdirectory that has none of its own). Zipping the working
// tree's files directly would serve zips a user never gets: without the
// LICENSE, for one.
//
// fencelock's modules require each other at a version not published yet;
// development builds them together through go.work, but "go mod tidy" runs
// per module with GOWORK=off and must resolve those requirements somewhere.
// scripts/check.sh points GOPROXY at this directory (then at the module
// cache, for everything else), so that tidy runs without the network, and
// the outside-user test (release_test.go) installs the modules from it as
// a user would:
//
//	go run ./scripts/modproxy -root . -out /tmp/proxy
//	GOWORK=off GOPROXY=file:///tmp/proxy,file://$(go env GOMODCACHE)/cache/download go mod tidy -diff
//
// With -public it writes nothing and prints the directories of the modules
// users require (publicDirs), which that test installs and
// scripts/apidiff.sh reports the API changes of.
package main

import (
	stdzip "archive/zip"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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
	public := flag.Bool("public", false, "print the directories of the public modules (those users require), one a line, and write nothing")
	flag.Parse()
	if *public && flag.NArg() == 0 {
		dirs, err := publicDirs(*root)
		if err != nil {
			fmt.Fprintln(os.Stderr, "modproxy:", err)
			os.Exit(1)
		}
		fmt.Println(strings.Join(dirs, "\n"))
		return
	}
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -out DIR [-root DIR] [-version v0.1.0] | modproxy -public [-root DIR]")
		os.Exit(2)
	}
	mods, err := write(*root, *out, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
	for _, m := range mods {
		fmt.Printf("%s %s (tag %s)\n", m.Path, *version, m.Tag(*version))
	}
}

// releaseTime is the time of the snapshot's commit and of every version's
// .info: fixed, so that the same tree gives the same zips.
var releaseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Module is one module of a checkout.
type Module struct {
	Path string // the module path, from its go.mod
	Dir  string // its directory, slash-separated and relative to the root ("." for the root)
}

// Tag returns the git tag that releases the module at version: the version
// itself for the root module, dir/version for a module in a subdirectory.
func (m Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// write serves every module under root at version in out, and returns the
// modules.
func write(root, out, version string) ([]Module, error) {
	files, err := gitFiles(root)
	if err != nil {
		return nil, err
	}
	var mods []Module
	for _, f := range files {
		if path.Base(f) != "go.mod" || strings.Contains("/"+f, "/testdata/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		modPath := modfile.ModulePath(data)
		if modPath == "" {
			return nil, fmt.Errorf("%s: no module line", f)
		}
		mods = append(mods, Module{Path: modPath, Dir: path.Dir(f)})
	}
	repo, err := os.MkdirTemp("", "modproxy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(repo)
	if err := snapshot(root, repo, files, mods, version); err != nil {
		return nil, err
	}
	for _, m := range mods {
		if err := serve(repo, out, m, version); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	return mods, nil
}

// snapshot makes repo a git repository whose one commit holds root's files
// (the work tree's content, committed or not), and tags every module in it
// at version.
func snapshot(root, repo string, files []string, mods []Module, version string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	date := releaseTime.Format(time.RFC3339)
	git := func(stdin string, args ...string) error {
		cmd := exec.Command("git", append([]string{
			"-c", "user.name=modproxy", "-c", "user.email=modproxy@localhost",
			"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "core.hooksPath=/dev/null",
			"--literal-pathspecs", "--git-dir", filepath.Join(repo, ".git"), "--work-tree", root,
		}, args...)...)
		cmd.Dir = root // pathspecs are relative to the current directory
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w\n%s", args[0], err, out)
		}
		return nil
	}
	if err := git("", "init", "-q"); err != nil {
		return err
	}
	// -f: a tracked file may match .gitignore; the list already leaves
	// out what git would not commit.
	if err := git(strings.Join(files, "\x00"), "add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"); err != nil {
		return err
	}
	if err := git("", "commit", "-q", "--no-verify", "-m", "release "+version); err != nil {
		return err
	}
	for _, m := range mods {
		if err := git("", "tag", m.Tag(version)); err != nil {
			return err
		}
	}
	return nil
}

// serve writes the list, .info, .mod and .zip files of module m at version,
// from its tag in repo.
func serve(repo, out string, m Module, version string) error {
	escaped, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	subdir := ""
	if m.Dir != "." {
		subdir = m.Dir
	}
	var zbuf bytes.Buffer
	mv := module.Version{Path: m.Path, Version: version}
	if err := zip.CreateFromVCS(&zbuf, mv, repo, m.Tag(version), subdir); err != nil {
		return err
	}
	gomod, err := zipFile(zbuf.Bytes(), m.Path+"@"+version+"/go.mod")
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, releaseTime})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zbuf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// zipFile returns the content of the file name in the zip archive z.
func zipFile(z []byte, name string) ([]byte, error) {
	r, err := stdzip.NewReader(bytes.NewReader(z), int64(len(z)))
	if err != nil {
		return nil, err
	}
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
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
