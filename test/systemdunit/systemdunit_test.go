package systemdunit

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		mode splitMode
		want []string
	}{
		{`/bin/a  b	c`, unitSyntax, []string{"/bin/a", "b", "c"}},
		{`"A=b c" D='e f'`, unitSyntax, []string{"A=b c", "D=e f"}},
		{`a"b c"d`, unitSyntax, []string{"ab cd"}},
		{`'x "y" z' \"q\"`, unitSyntax, []string{`x "y" z`, `"q"`}},
		{`a\tb \s`, unitSyntax, []string{"a\tb", " "}},
		{`''`, unitSyntax, []string{""}},
		{`--a=1 --b="x y" --c`, valueSyntax, []string{"--a=1", "--b=x y", "--c"}},
		{`a\tb "open`, valueSyntax, []string{"atb", "open"}},
	} {
		got, err := splitWords(tc.in, tc.mode)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`"open`, `a\`, `\x41`} {
		if got, err := splitWords(bad, unitSyntax); err == nil {
			t.Errorf("splitWords(%q) = %q, want an error", bad, got)
		}
	}
}

func TestExpandArgv(t *testing.T) {
	env := map[string]string{"ARGS": `--a=1  --b="x y"`, "EMPTY": "", "P": "/p q"}
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		// $NAME as a word: split, quotes respected; unset or empty gives no word.
		{[]string{"/bin/k", "$ARGS", "$UNSET", "$EMPTY", "--z"}, []string{"/bin/k", "--a=1", "--b=x y", "--z"}},
		// ${NAME}: one word, whitespace kept; unset is empty.
		{[]string{"${ARGS}", "--dir=${P}/x", "${UNSET}"}, []string{`--a=1  --b="x y"`, "--dir=/p q/x", ""}},
		// $NAME inside a word and $$ stay literal (one $).
		{[]string{"--x=$P", "$$P", "a$$b", "$", "${"}, []string{"--x=$P", "$P", "a$b", "$", "${"}},
	} {
		got, err := expandArgv(tc.in, env)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("expandArgv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := expandArgv([]string{"${A:-b}"}, env); err == nil {
		t.Error("${A:-b} accepted; it is not implemented")
	}
}

func TestParseEnvFile(t *testing.T) {
	text := `# kubeadm writes this
KUBELET_KUBEADM_ARGS="--node-ip=10.0.0.1 --x=\"q\""
; another comment
  EXTRA = plain value   
SQ='a "b" \c'
CONT=one\
two
MULTI="l1
l2"
EMPTY=
`
	got, err := parseEnvFile("f", text)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{
		{"KUBELET_KUBEADM_ARGS", `--node-ip=10.0.0.1 --x="q"`},
		{"EXTRA", "plain value"},
		{"SQ", `a "b" \c`},
		{"CONT", "onetwo"},
		{"MULTI", "l1\nl2"},
		{"EMPTY", ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseEnvFile = %q\nwant %q", got, want)
	}
	for _, bad := range []string{"JUSTAWORD\n", "1X=y\n", "A=\"open\n"} {
		if _, err := parseEnvFile("bad", bad); err == nil || !strings.HasPrefix(err.Error(), "bad:1:") {
			t.Errorf("parseEnvFile(%q) error = %v, want one naming bad:1", bad, err)
		}
	}
}

// root writes files (absolute path -> content) under a temporary directory and returns
// the mapping Load and Start read them through.
func root(t *testing.T, files map[string]string) func(string) string {
	dir := t.TempDir()
	hostPath := func(p string) string { return filepath.Join(dir, p) }
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(hostPath(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(hostPath(p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return hostPath
}

func start(t *testing.T, hostPath func(string) string) (*Service, Start) {
	t.Helper()
	s, err := Load("k.service", hostPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Start(hostPath)
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func TestLoadStart(t *testing.T) {
	hostPath := root(t, map[string]string{
		"/lib/systemd/system/k.service":     "[Unit]\nDescription=k\n[Service]\nExecStart=/bin/k --from-unit\n",
		"/usr/lib/systemd/system/k.service": "[Service]\nExecStart=/bin/hidden\n", // /lib comes after /usr/lib
		"/usr/lib/systemd/system/k.service.d/10-a.conf": `[Service]
Environment="A=--a-unit" "B=--b-unit"
EnvironmentFile=-/etc/a.env
EnvironmentFile=-/etc/missing.env
ExecStart=
ExecStart=/bin/k $A \
    $B ${C}
`,
		// Same name as in /usr/lib: this one hides that one.
		"/etc/systemd/system/k.service.d/20-b.conf":     "[Service]\nEnvironment=C=from-etc\n",
		"/usr/lib/systemd/system/k.service.d/20-b.conf": "[Service]\nEnvironment=C=hidden\n",
		// Later than the files in name order, but files beat Environment=.
		"/etc/systemd/system/k.service.d/90-c.conf": "[Unit]\nWants=x.service\nAfter=x.service\n[Service]\nEnvironment=A=--a-late B=--b-late\nExecStartPre=-/bin/check $$A\n",
		"/etc/a.env": "A=--a-file\n",
		"/etc/systemd/system/k.service.d/notes.txt": "ignored",
	})
	s, st := start(t, hostPath)
	wantFiles := []string{"/usr/lib/systemd/system/k.service", "/usr/lib/systemd/system/k.service.d/10-a.conf", "/etc/systemd/system/k.service.d/20-b.conf", "/etc/systemd/system/k.service.d/90-c.conf"}
	if !reflect.DeepEqual(s.Files, wantFiles) {
		t.Errorf("files %q, want %q", s.Files, wantFiles)
	}
	if want := []string{"/bin/k", "--a-file", "--b-late", "from-etc"}; !reflect.DeepEqual(st.ExecStart.Argv, want) {
		t.Errorf("ExecStart %q, want %q", st.ExecStart.Argv, want)
	}
	if want := []string{"A=--a-file", "B=--b-late", "C=from-etc"}; !reflect.DeepEqual(st.Env, want) {
		t.Errorf("env %q, want %q", st.Env, want)
	}
	if want := []Command{{Argv: []string{"/bin/check", "$A"}, IgnoreFailure: true}}; !reflect.DeepEqual(st.ExecStartPre, want) {
		t.Errorf("ExecStartPre %+v, want %+v", st.ExecStartPre, want)
	}
	if !reflect.DeepEqual(s.Wants, []string{"x.service"}) || !reflect.DeepEqual(s.After, []string{"x.service"}) {
		t.Errorf("Wants %q After %q", s.Wants, s.After)
	}
}

func TestLaterFileWins(t *testing.T) {
	hostPath := root(t, map[string]string{
		"/etc/systemd/system/k.service": "[Service]\nEnvironmentFile=/one.env\nEnvironmentFile=/two.env\nExecStart=/bin/k $V\n",
		"/one.env":                      "V=one\nW=w\n",
		"/two.env":                      "V=two\n",
	})
	_, st := start(t, hostPath)
	if want := []string{"/bin/k", "two"}; !reflect.DeepEqual(st.ExecStart.Argv, want) {
		t.Errorf("ExecStart %q, want %q", st.ExecStart.Argv, want)
	}
}

func TestLoadErrors(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"two ExecStart":      {"/etc/systemd/system/k.service": "[Service]\nExecStart=/bin/a\nExecStart=/bin/b\n"},
		"no ExecStart":       {"/etc/systemd/system/k.service": "[Service]\nExecStart=/bin/a\nExecStart=\n"},
		"relative command":   {"/etc/systemd/system/k.service": "[Service]\nExecStart=k\n"},
		"unsupported prefix": {"/etc/systemd/system/k.service": "[Service]\nExecStart=+/bin/k\n"},
		"specifier":          {"/etc/systemd/system/k.service": "[Service]\nExecStart=/bin/k %n\n"},
		"bad Environment":    {"/etc/systemd/system/k.service": "[Service]\nEnvironment=novalue\nExecStart=/bin/k\n"},
		"oneshot":            {"/etc/systemd/system/k.service": "[Service]\nType=oneshot\nExecStart=/bin/k\n"},
		"no unit":            {"/etc/systemd/system/other.service": "[Service]\nExecStart=/bin/k\n"},
		"outside a section":  {"/etc/systemd/system/k.service": "ExecStart=/bin/k\n"},
		"unterminated quote": {"/etc/systemd/system/k.service": "[Service]\nExecStart=/bin/k \"x\n"},
		"relative env file":  {"/etc/systemd/system/k.service": "[Service]\nEnvironmentFile=x.env\nExecStart=/bin/k\n"},
	} {
		if _, err := Load("k.service", root(t, files)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	// A file without "-" must exist.
	hostPath := root(t, map[string]string{"/etc/systemd/system/k.service": "[Service]\nEnvironmentFile=/none.env\nExecStart=/bin/k\n"})
	s, err := Load("k.service", hostPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(hostPath); err == nil || !strings.Contains(err.Error(), "/none.env") {
		t.Errorf("missing required EnvironmentFile: %v", err)
	}
}
