package htmlreport

import (
	_ "embed"
	"html/template"
	"sync"
)

// The sweep and fragcheck reports share a head and a style; they have no
// script: hover read-outs are SVG titles.
//
//go:embed pages.html.tmpl
var pagesText string

var pagesTmpl = sync.OnceValue(func() *template.Template { return template.Must(template.New("pages").Parse(pagesText)) })
