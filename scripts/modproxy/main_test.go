package main

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A checkout with a nested module, an ignored file, an untracked one, one
// that .gitattributes keeps out of archives and a LICENSE at the root: each
// module is served with its own files (the untracked one included, the
// ignored one, the export-ignore one and the nested module's left out), the
// root's LICENSE (the nested module has none of its own), its go.mod and
// the version in its list.
func TestWrite(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":         "module example.com/m\n\ngo 1.26.0\n",
		"m.go":           "package m\n",
		".gitignore":     "/built\n",
		".gitattributes": "/notes export-ignore\n",
		"notes":          "not released\n",
		"LICENSE":        "the license\n",
		"built":          "a build product\n",
		"sub/go.mod":     "module example.com/m/sub\n\ngo 1.26.0\n",
		"sub/sub.go":     "package sub\n",
		"pkg/pkg.go":     "package pkg\n",
		"pkg/new.go":     "package pkg // not committed yet\n",
		"pkg/testdata/x": "data\n",
	} {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "go.mod", "m.go", ".gitignore", ".gitattributes", "notes", "LICENSE", "sub", "pkg/pkg.go", "pkg/testdata")

	out := t.TempDir()
	mods, err := write(root, out, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(mods, func(a, b Module) int { return strings.Compare(a.Path, b.Path) })
	if want := []Module{{"example.com/m", "."}, {"example.com/m/sub", "sub"}}; !slices.Equal(mods, want) {
		t.Fatalf("modules %v, want %v", mods, want)
	}
	if tag := mods[1].Tag("v0.1.0"); tag != "sub/v0.1.0" {
		t.Errorf("sub's tag %q, want sub/v0.1.0", tag)
	}
	for mod, want := range map[string][]string{
		"example.com/m":     {".gitattributes", ".gitignore", "LICENSE", "go.mod", "m.go", "pkg/new.go", "pkg/pkg.go", "pkg/testdata/x"},
		"example.com/m/sub": {"LICENSE", "go.mod", "sub.go"},
	} {
		dir := filepath.Join(out, filepath.FromSlash(mod), "@v")
		list, err := os.ReadFile(filepath.Join(dir, "list"))
		if err != nil || string(list) != "v0.1.0\n" {
			t.Errorf("%s: list %q (%v)", mod, list, err)
		}
		gomod, err := os.ReadFile(filepath.Join(dir, "v0.1.0.mod"))
		if err != nil || !strings.HasPrefix(string(gomod), "module "+mod+"\n") {
			t.Errorf("%s: .mod %q (%v)", mod, gomod, err)
		}
		z, err := zip.OpenReader(filepath.Join(dir, "v0.1.0.zip"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range z.File {
			got = append(got, strings.TrimPrefix(f.Name, mod+"@v0.1.0/"))
		}
		z.Close()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: zip holds %v, want %v", mod, got, want)
		}
	}
}
