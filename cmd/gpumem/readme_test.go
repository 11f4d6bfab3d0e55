package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestREADME runs every command block of README.md, so that its examples
// cannot drift from what gpumem does:
//
//   - a ```sh block's lines run one by one and must exit 0;
//   - a ```console block's "$ " lines run, and what follows each must be
//     what it prints: stdout line by line, except that a line "..." stands
//     for any number of lines, a line ending in " ..." for any line that
//     begins with the rest, and the "gpumem: " lines are looked for on
//     stderr;
//   - the workload script (the plain block starting "seed") runs;
//   - python blocks (lines of the user's training program) and the GitHub
//     Actions workflow are skipped, saying so; a block of another kind
//     fails;
//   - the budget file (the ```yaml block with cases:) works as pasted: a
//     first fragcheck passes and says how to record the baseline, which
//     --update-baseline then writes, directory and all.
//
// The commands run in a directory where the repository's testdata and
// scripts are at hand and the snapshots the README names are the shared
// fixtures (standIns). A line that needs a GPU, the network, a Python
// training script of the user's or a long-running daemon is skipped, and
// must be listed in skipped with the reason: an unknown line fails.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the README's traces")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(string(readme))
	work := readmeWorkDir(t)
	t.Chdir(work)
	seen := map[string]bool{}
	for _, b := range blocks {
		switch b.lang {
		case "sh":
			for _, line := range b.lines {
				cmd := shellCommand(line)
				if cmd == "" {
					continue
				}
				seen[cmd] = true
				if why, ok := skipped[cmd]; ok {
					t.Logf("skipped: %s: %s", cmd, why)
					continue
				}
				args, ok := gpumemArgs(t, cmd)
				if !ok {
					t.Errorf("README.md:%d: %q is neither a gpumem command nor listed in skipped", b.start, cmd)
					continue
				}
				if out, errs, code := gm(t, args...); code != 0 || out == "" {
					t.Errorf("README.md:%d: %s: exit %d, %d bytes out\n%s", b.start, cmd, code, len(out), errs)
				}
			}
		case "console":
			for _, c := range consoleCommands(b) {
				seen[c.cmd] = true
				if why, ok := skipped[c.cmd]; ok {
					t.Logf("skipped: %s: %s", c.cmd, why)
					continue
				}
				args, ok := gpumemArgs(t, c.cmd)
				if !ok {
					t.Errorf("README.md:%d: %q is neither a gpumem command nor listed in skipped", c.line, c.cmd)
					continue
				}
				out, errs, code := gm(t, args...)
				if code != 0 && code != 1 {
					t.Errorf("README.md:%d: %s: exit %d\n%s", c.line, c.cmd, code, errs)
					continue
				}
				if msg := matchConsole(c.want, out, errs); msg != "" {
					t.Errorf("README.md:%d: %s prints other than the README shows: %s\n--- it prints:\n%s%s", c.line, c.cmd, msg, out, errs)
				}
			}
		case "": // the workload script of "Workloads"
			if len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "seed ") {
				script := filepath.Join(t.TempDir(), "readme.gpumem")
				if err := os.WriteFile(script, []byte(b.text), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, errs, code := gm(t, "run", script); code != 0 || !strings.Contains(out, "outcome     completed") {
					t.Errorf("README.md:%d: the workload script: exit %d\n%s%s", b.start, code, out, errs)
				}
			} else {
				t.Errorf("README.md:%d: a plain block that is not a workload script: give it a language", b.start)
			}
		case "yaml":
			if strings.Contains(b.text, "\ncases:") {
				checkBudgetExample(t, b)
			} else {
				t.Logf("skipped: the yaml block at README.md:%d: a GitHub Actions workflow, which runs on GitHub", b.start)
			}
		case "python":
			t.Logf("skipped: the python block at README.md:%d: lines for the user's training program, "+
				"which need torch on a GPU", b.start)
		default:
			t.Errorf("README.md:%d: a block of %q, which this test does not know how to run", b.start, b.lang)
		}
	}
	for cmd := range skipped {
		if !seen[cmd] {
			t.Errorf("skipped lists %q, which README.md does not have", cmd)
		}
	}
}

// skipped are the README's command lines that this test cannot run, and
// why. The others it runs.
var skipped = map[string]string{
	"bash scripts/test.sh": "the whole test suite, this test included",
	"python3 make_trace.py | gpumem replay -": "make_trace.py stands for the user's own program " +
		"(reading - from stdin: testdata/script/stdin_compressed.txtar)",
	"gpumem record -f snapshot.pickle -- python3 train.py --batch 8":    "needs a GPU and the user's training script",
	"gpumem record -f s.pickle -- python3 python/examples/train_mlp.py": "needs a GPU (PyTorch on CUDA)",
	"gpumem replay s.pickle": "s.pickle is what the line before records on a GPU",
	"gpumem record -f ddp.pickle -- torchrun --nproc_per_node 8 train.py":   "needs 8 GPUs and the user's training script",
	"gpumem record -f ddp.pickle --every 10m -- accelerate launch train.py": "needs GPUs, accelerate and the user's training script",
	"gpumem estimate -- python3 train.py --batch-size 32": "train.py stands for the user's training script; " +
		"cmd_estimate_test.go runs estimate on test scripts under torch",
	"gpumem estimate --device-memory 24GiB -o json -- python3 train.py":          "the user's training script, as above",
	"gpumem estimate --find-max BS=1..512 -- python3 train.py --batch-size {BS}": "the user's training script, as above",
	"gpumem sweep estimate.trace":                                                "estimate.trace is what the lines before write",
	"gpumem exporter":                                                            "a daemon serving until stopped; test/exporter_e2e.sh scrapes it with Prometheus",
	"gpumem exporter --textfile /var/lib/node_exporter/textfile": "a daemon writing into a system directory until stopped; " +
		"cmd_exporter_test.go runs --textfile",
}

// standIns are the files the README's commands name, and the fixture each
// stands for.
var standIns = map[string]string{
	"snapshot.pickle":           "gpt2_varlen.pickle",
	"gpt2_varlen_stacks.pickle": "gpt2_varlen_stacks.pickle",
	"ddp_gpt2.rank0.pickle":     "ddp/ddp_gpt2.rank0.pickle",
	"ddp_gpt2.rank1.pickle":     "ddp/ddp_gpt2.rank1.pickle",
}

// readmeWorkDir makes the directory the README's commands run in:
// testdata and scripts of the repository, the stand-ins, and
// snapshot.pickle.zst compressed from its stand-in.
func readmeWorkDir(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"testdata", "scripts"} {
		if err := os.Symlink(filepath.Join(repo, d), filepath.Join(work, d)); err != nil {
			t.Fatal(err)
		}
	}
	for name, fixture := range standIns {
		if err := os.Symlink(filepath.Join(repo, "testdata", "pytorch", fixture), filepath.Join(work, name)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(work, "snapshot.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "snapshot.pickle.zst"), enc.EncodeAll(data, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	return work
}

// checkBudgetExample runs fragcheck on the README's budget file as it is,
// in a directory of its own.
func checkBudgetExample(t *testing.T, b readmeBlock) {
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(mustWd(t), "testdata"), filepath.Join(dir, "testdata")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpumem.yaml"), []byte(b.text), 0o644); err != nil {
		t.Fatal(err)
	}
	wd := mustWd(t)
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	out, errs, code := gm(t, "fragcheck")
	if code != 0 || !strings.Contains(errs, "record it with: gpumem fragcheck --update-baseline") {
		t.Errorf("README.md:%d: the budget file: first fragcheck exits %d\n%s%s", b.start, code, out, errs)
	}
	if out, errs, code = gm(t, "fragcheck", "--update-baseline"); code != 0 {
		t.Errorf("README.md:%d: the budget file: fragcheck --update-baseline exits %d\n%s%s", b.start, code, out, errs)
	}
	if out, errs, code = gm(t, "fragcheck"); code != 0 || errs != "" {
		t.Errorf("README.md:%d: the budget file: fragcheck against the baseline exits %d\n%s%s", b.start, code, out, errs)
	}
}

func mustWd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// readmeBlock is a fenced code block: its language, its lines and the
// README line it starts on.
type readmeBlock struct {
	lang  string
	start int
	lines []string
	text  string
}

func readmeBlocks(md string) []readmeBlock {
	var out []readmeBlock
	var cur *readmeBlock
	for i, l := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(l, "```"), start: i + 2}
		case cur != nil && l == "```":
			cur.text = strings.Join(cur.lines, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	return out
}

// shellCommand is a line of a sh block without its comment; "" for a
// comment line or an empty one.
func shellCommand(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	if strings.HasPrefix(strings.TrimSpace(line), "#") {
		return ""
	}
	return strings.TrimSpace(line)
}

// gpumemArgs splits a gpumem command line as the shell would (single
// quotes only; the README needs no more): "gpumem", "go run ./cmd/gpumem"
// and "source <(gpumem ...)" are the program.
func gpumemArgs(t *testing.T, cmd string) ([]string, bool) {
	if s, ok := strings.CutPrefix(cmd, "source <("); ok && strings.HasSuffix(s, ")") {
		cmd = strings.TrimSuffix(s, ")")
	}
	cmd, ok := strings.CutPrefix(cmd, "gpumem ")
	if !ok {
		if cmd, ok = strings.CutPrefix(cmd, "go run ./cmd/gpumem "); !ok {
			return nil, false
		}
	}
	var args []string
	var cur strings.Builder
	quoted, any := false, false
	for _, r := range cmd {
		switch {
		case r == '\'':
			quoted, any = !quoted, true
		case r == ' ' && !quoted:
			if any {
				args = append(args, cur.String())
			}
			cur.Reset()
			any = false
		case strings.ContainsRune("|<>;&$`\"", r) && !quoted:
			t.Errorf("%q: the test runs no shell", cmd)
			return nil, false
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		args = append(args, cur.String())
	}
	return args, true
}

// consoleCommand is one "$ " line of a console block and the output the
// README shows after it.
type consoleCommand struct {
	cmd  string
	line int
	want []string
}

func consoleCommands(b readmeBlock) []consoleCommand {
	var out []consoleCommand
	for i, l := range b.lines {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			out = append(out, consoleCommand{cmd: c, line: b.start + i})
		} else if len(out) > 0 {
			out[len(out)-1].want = append(out[len(out)-1].want, l)
		}
	}
	return out
}

// matchConsole compares the output a README block shows with what the
// command printed (see TestREADME for the rules); "" when they match.
func matchConsole(want []string, stdout, stderr string) string {
	var lines []string
	for _, w := range want {
		if strings.HasPrefix(w, "gpumem: ") {
			if !strings.Contains("\n"+stderr, "\n"+w+"\n") {
				return "stderr lacks " + w
			}
			continue
		}
		lines = append(lines, strings.TrimRight(w, " "))
	}
	got := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	for i := range got {
		got[i] = strings.TrimRight(got[i], " ")
	}
	if match(lines, got) {
		return ""
	}
	// the first line shown that is not printed where it should be
	for i := range lines {
		if !match(append(append([]string{}, lines[:i+1]...), "..."), got) {
			return "from its line " + quoteLine(lines[i])
		}
	}
	return "its last line is not the end"
}

// match reports whether got is want, a line "..." matching any lines and
// a line ending in " ..." any line that begins with the rest.
func match(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	w := want[0]
	if strings.TrimSpace(w) == "..." {
		for k := 0; k <= len(got); k++ {
			if match(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	if len(got) == 0 {
		return false
	}
	ok := w == got[0]
	if p, cut := strings.CutSuffix(w, " ..."); cut {
		ok = strings.HasPrefix(got[0], p)
	}
	return ok && match(want[1:], got[1:])
}

func quoteLine(s string) string { return "«" + s + "»" }
