package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// releaseVersion is the version the outside-user test installs.
const releaseVersion = "v0.1.0"

// TestOutsideUser installs the release as a user outside the repository
// does: every module of the work tree is served at v0.1.0 from its tag
// (write), third-party modules come from the module cache (a second
// file-based proxy) or, those it lacks, from the go command's own proxy
// (GOPROXY), and in an empty module with no go.work and no replace lines
// it runs
//
//	go get <every public module>@v0.1.0
//	go mod tidy; go build   (a program that imports every public package)
//	./prog <redis address>  (acquire, print the fence, release)
//	go install <every command>@v0.1.0; fencelock version
//
// With a warm module cache it needs no network. On a fresh machine the
// cache lacks some of what the user's go mod tidy loads (the packages and
// tests of every dependency), and those come from the network, as for any
// go test there. fencelock's modules are not in the checksum database
// (GOSUMDB=off); the module's go.sum starts with the lines of the
// repository's go.sum files, which the go command checks third-party zips
// against.
func TestOutsideUser(t *testing.T) {
	srv := servertest.Redis(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	mods, err := write(root, proxy, releaseVersion)
	if err != nil {
		t.Fatal(err)
	}
	public := publicModules(t, root, mods)
	checkLicenses(t, root, proxy, public)

	env := userEnv(t, tmp, proxy)
	user := filepath.Join(tmp, "user")
	if err := os.Mkdir(user, 0o755); err != nil {
		t.Fatal(err)
	}
	goCmd(t, user, env, "mod", "init", "example.com/outsideuser")
	seedGoSum(t, root, user, public)
	get := []string{"get"}
	for _, m := range public {
		get = append(get, m.Path+"@"+releaseVersion)
	}
	goCmd(t, user, env, get...)

	libs, commands := publicPackages(t, user, env, public)
	t.Logf("public packages: %s; commands: %s", strings.Join(libs, " "), strings.Join(commands, " "))
	if err := os.WriteFile(filepath.Join(user, "main.go"), userProgram(libs), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, user, env, "mod", "tidy")
	goCmd(t, user, env, "build", "-o", "prog", ".")
	out := run(t, user, env, filepath.Join(user, "prog"), srv.Addr())
	if !regexp.MustCompile(`^fence [1-9][0-9]*\nreleased\n$`).MatchString(out) {
		t.Fatalf("the user's program printed %q, want a positive fence and released", out)
	}

	install := []string{"install"}
	cli := ""
	for _, c := range commands {
		install = append(install, c+"@"+releaseVersion)
		if path.Base(c) == "fencelock" {
			cli = c
		}
	}
	if cli == "" {
		t.Fatalf("no public command is named fencelock among %v", commands)
	}
	goCmd(t, user, env, install...)
	out = run(t, user, env, filepath.Join(tmp, "bin", "fencelock"), "version")
	if first, _, _ := strings.Cut(out, "\n"); first != "fencelock "+releaseVersion {
		t.Fatalf("fencelock version printed %q, want a first line %q", out, "fencelock "+releaseVersion)
	}
}

// publicModules returns the modules of root's go.work that users require
// (publicDirs), in go.work's order.
func publicModules(t *testing.T, root string, mods []Module) []Module {
	t.Helper()
	dirs, err := publicDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	var public []Module
	for _, dir := range dirs {
		i := slices.IndexFunc(mods, func(m Module) bool { return m.Dir == dir })
		if i < 0 {
			t.Fatalf("go.work uses %s, which is not a module of the work tree", dir)
		}
		public = append(public, mods[i])
	}
	return public
}

// checkLicenses checks that every public module's zip holds the root's
// LICENSE, which pkg.go.dev needs to show a module's documentation.
func checkLicenses(t *testing.T, root, proxy string, public []Module) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range public {
		z, err := os.ReadFile(filepath.Join(proxy, filepath.FromSlash(m.Path), "@v", releaseVersion+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := zipFile(z, m.Path+"@"+releaseVersion+"/LICENSE")
		if err != nil {
			t.Errorf("%s: no LICENSE in its zip: %v", m.Path, err)
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s: its zip's LICENSE is not the root's", m.Path)
		}
	}
}

// userEnv returns the environment of the user's go commands: no workspace,
// fencelock's modules from proxy and everything else from the module cache
// or else the go command's own proxy, a module cache and a GOBIN of their
// own under tmp.
// -trimpath lets the build cache serve packages compiled from another
// module cache directory (the path is otherwise part of the cache key).
func userEnv(t *testing.T, tmp, proxy string) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE GOPROXY: %v", err)
	}
	modcache, goproxy, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	download := filepath.Join(modcache, "cache", "download")
	proxies := "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(download)
	if goproxy != "" && goproxy != "off" {
		proxies += "," + goproxy
	}
	return append(os.Environ(),
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOFLAGS=-modcacherw -trimpath",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPROXY="+proxies,
		"GOSUMDB=off",
		"GONOPROXY=", "GOPRIVATE=", "GONOSUMDB=", "GOINSECURE=",
		"GOBIN="+filepath.Join(tmp, "bin"),
	)
}

// seedGoSum starts the user's go.sum with the lines of the public modules'
// go.sum files.
func seedGoSum(t *testing.T, root, user string, public []Module) {
	t.Helper()
	var lines []string
	for _, m := range public {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(strings.TrimSpace(string(data)), "\n")...)
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" })
	if err := os.WriteFile(filepath.Join(user, "go.sum"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// publicPackages lists the packages of the public modules a user may
// import (internal packages and test harnesses left out) and their
// commands (main packages).
func publicPackages(t *testing.T, user string, env []string, public []Module) (libs, commands []string) {
	t.Helper()
	args := []string{"list", "-e", "-f", "{{.ImportPath}} {{.Name}} {{with .Error}}{{.}}{{end}}"}
	for _, m := range public {
		args = append(args, m.Path+"/...")
	}
	seen := map[string]bool{}
	for line := range strings.Lines(goCmd(t, user, env, args...)) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			t.Fatalf("go list: %q", line)
		}
		if len(fields) > 2 {
			t.Fatalf("go list: %s", line)
		}
		pkg, name := fields[0], fields[1]
		elems := strings.Split(pkg, "/")
		if seen[pkg] || slices.Contains(elems, "internal") || slices.Contains(elems, "testing") {
			continue
		}
		seen[pkg] = true
		if name == "main" {
			commands = append(commands, pkg)
		} else {
			libs = append(libs, pkg)
		}
	}
	return libs, commands
}

// userProgram returns the main.go of a program that imports every package
// of libs and takes, reports and releases a lock on the redis-server whose
// address is its argument.
func userProgram(libs []string) []byte {
	var b strings.Builder
	b.WriteString(`package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/redis/go-redis/v9"
`)
	for _, p := range libs {
		if p != "github.com/fencelock/fencelock" && p != "github.com/fencelock/fencelock/redisbackend" {
			fmt.Fprintf(&b, "\t_ %q\n", p)
		}
	}
	b.WriteString(`)

func main() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1], ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := fencelock.New(redisbackend.New(rdb))
	defer locks.Close()
	lk, err := locks.TryAcquire(ctx, "outside-user", 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("fence", lk.Fence())
	if err := lk.Release(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("released")
}
`)
	return []byte(b.String())
}

// goCmd runs the go command in dir and returns its standard output. It
// runs at the tests' own priority: at the lowest one, on a machine whose
// cores are busy (CI under load), its builds got so little CPU that the
// test came within a minute of the package's 10-minute timeout, and the
// tests that measure time are built to hold under such load anyway.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	return run(t, dir, env, "go", args...)
}

// run runs name in dir, fails the test if it fails, and returns its
// standard output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		hint := ""
		if strings.Contains(stderr.String(), "/cache/download/") {
			hint = "\n(a third-party module missing from the module cache that GOPROXY could not serve either)"
		}
		t.Fatalf("%s %s: %v\n%s%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String(), hint)
	}
	return stdout.String()
}
