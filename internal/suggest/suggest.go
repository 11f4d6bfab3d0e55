package suggest

import (
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// maxDistance is the most edits a suggestion may be away: cobra's default
// for commands, so that flags and commands are suggested alike.
const maxDistance = 2

// Closest returns the names close to typed (see the package comment),
// nearest first, ties in name order.
func Closest(typed string, names []string) []string {
	type cand struct {
		name string
		d    int
	}
	var out []cand
	t := strings.ToLower(typed)
	for _, n := range names {
		l := strings.ToLower(n)
		if l == t || n == "" {
			continue
		}
		d := distance(t, l)
		if d <= maxDistance || (len(t) > 1 && strings.HasPrefix(l, t)) {
			out = append(out, cand{n, d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].d != out[j].d {
			return out[i].d < out[j].d
		}
		return out[i].name < out[j].name
	})
	names = make([]string, len(out))
	for i, c := range out {
		names[i] = c.name
	}
	return names
}

// FlagHints are the hints for err, a flag error of c: "did you mean
// --policy?" for each flag of c close to an unknown one; none for other
// errors.
func FlagHints(c *cobra.Command, err error) []string {
	name, ok := UnknownFlag(err.Error())
	if !ok {
		return nil
	}
	var names, hints []string
	c.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	for _, s := range Closest(name, names) {
		hints = append(hints, "did you mean --"+s+"?")
	}
	return hints
}

// UnknownFlag returns the flag name of an "unknown flag: --name" error
// message of the flag parser (pflag), without its dashes and value, and
// false for other messages (shorthand flags are one letter: nothing to
// suggest).
func UnknownFlag(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok || rest == "" {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "=")
	return name, true
}

// CommandHints are the hints for cobra's "unknown command" error msg of
// program: "did you mean replay?" for each command cobra suggests, then
// where the list of commands is.
func CommandHints(msg, program string) []string {
	var hints []string
	for _, s := range CobraCommands(msg) {
		hints = append(hints, "did you mean "+s+"?")
	}
	return append(hints, "run '"+program+" --help' for the list of commands")
}

// CobraCommands returns the names cobra suggests after the first line of
// an "unknown command" error: "Did you mean this?" and one tab-indented
// name a line.
func CobraCommands(msg string) []string {
	var out []string
	for _, l := range strings.Split(msg, "\n")[1:] {
		if strings.HasPrefix(l, "\t") && strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// distance is the Levenshtein distance between a and b in bytes (flag and
// command names are ASCII), with one row of the table kept.
func distance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			next := min(row[j]+1, row[j-1]+1, diag+cost)
			diag, row[j] = row[j], next
		}
	}
	return row[len(b)]
}
