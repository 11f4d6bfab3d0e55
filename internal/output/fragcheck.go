package output

import "github.com/gpumem/gpumem/internal/budget"

// FragcheckFormats are the formats of gpumem fragcheck.
var FragcheckFormats = &Registry[[]budget.Result]{Kind: "The report of `fragcheck`", Formats: []Format[[]budget.Result]{
	{Table, "a row per case, then the findings in words (fragcheck_table.go)", RenderFunc[[]budget.Result](fragcheckTable)},
	{JSON, "an overall status, counts, and each case with its figures, limits and findings (fragcheck_json.go)", RenderFunc[[]budget.Result](fragcheckJSON)},
	{JUnit, "a JUnit XML report for CI test views (fragcheck_junit.go)", RenderFunc[[]budget.Result](fragcheckJUnit)},
}}
