package output

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// GitHubAnnotations writes a GitHub Actions workflow command for every
// warning, failure and error in rs ("::error title=...::message"), which
// GitHub shows on the run's summary and, for cases from a budget file, on
// the file's line.
func GitHubAnnotations(w io.Writer, rs []budget.Result) error {
	bw := bufio.NewWriter(w)
	for i := range rs {
		r := &rs[i]
		props := []string{}
		if r.Case.File != "" {
			props = append(props, "file="+escapeProperty(r.Case.File))
			if r.Case.Line > 0 {
				props = append(props, fmt.Sprintf("line=%d", r.Case.Line))
			}
		}
		props = append(props, "title="+escapeProperty("gpumem fragcheck: "+r.Case.Name))
		emit := func(level, msg string) {
			fmt.Fprintf(bw, "::%s %s::%s\n", level, strings.Join(props, ","), escapeData(msg))
		}
		if r.Err != nil {
			emit("error", r.Err.Error())
		}
		for _, f := range r.Findings {
			switch f.Status {
			case budget.Fail:
				emit("error", f.Message)
			case budget.Warn:
				emit("warning", f.Message)
			}
		}
	}
	return bw.Flush()
}

// escapeData and escapeProperty escape as the Actions runner unescapes
// workflow commands (actions/toolkit, command.ts).
// escapeData and escapeProperty escape workflow-command text as GitHub
// documents it, and every other control or bidi character too: a file or
// case name cannot end the command, start another or hide text.
func escapeData(s string) string { return textsafe.GitHubData(s) }

func escapeProperty(s string) string { return textsafe.GitHubProperty(s) }
