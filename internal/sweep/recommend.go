package sweep

// Lowest returns the row with the lowest peak reserved memory among those
// that fit every card and that keep accepts (nil accepts all), ties going
// to fewer device allocations, then to the earlier row. It returns nil
// when no row qualifies.
func Lowest(rows []Row, keep func(*Row) bool) *Row {
	return lowest(rows, func(r *Row) bool { return r.FitsAll() && (keep == nil || keep(r)) })
}

func lowest(rows []Row, ok func(*Row) bool) *Row {
	var best *Row
	for i := range rows {
		r := &rows[i]
		if !ok(r) {
			continue
		}
		if best == nil || r.PeakReserved() < best.PeakReserved() ||
			(r.PeakReserved() == best.PeakReserved() && r.DeviceAllocs() < best.DeviceAllocs()) {
			best = r
		}
	}
	return best
}

// A Recommendation is the setting a sweep advises.
type Recommendation struct {
	// Best is the settable row with the lowest peak reserved memory that
	// fits every card (but those in TooSmall), ties going to fewer device
	// allocations; nil when none fits.
	Best *Row
	// Baseline is the row of PyTorch's defaults; nil when the sweep has
	// none.
	Baseline *Row
	// Saved is Baseline's peak reserved minus Best's, and Percent that as
	// a percentage of Baseline's; both 0 without a baseline or a best.
	Saved   int64
	Percent float64
	// Unsettable are the rows that fit with less peak reserved memory
	// than Best (all of those that fit, without a Best) but that
	// PYTORCH_CUDA_ALLOC_CONF cannot select: other policies, such as
	// nocache.
	Unsettable []*Row
	// TooSmall are the cards, by index, that no settable row fits. They
	// cannot tell settings apart, so the others decide.
	TooSmall []int
}

// Fits reports whether r fits every card but those in TooSmall.
func (rec *Recommendation) Fits(r *Row) bool {
	if !r.Fits() {
		return false
	}
	for k := range r.Cards {
		if !r.Cards[k].Fits() && !rec.tooSmall(k) {
			return false
		}
	}
	return true
}

func (rec *Recommendation) tooSmall(k int) bool {
	for _, t := range rec.TooSmall {
		if t == k {
			return true
		}
	}
	return false
}

// Recommend picks, among rows, the setting to use: see [Recommendation].
// When no settable row fits some card, that card is left out of the
// choice (and listed in TooSmall) rather than leaving no advice at all.
func Recommend(rows []Row) Recommendation {
	var rec Recommendation
	cards := 0
	for i := range rows {
		cards = max(cards, len(rows[i].Cards))
	}
	for k := range cards {
		fits := false
		for i := range rows {
			r := &rows[i]
			if r.Setting.Settable() && k < len(r.Cards) && r.Cards[k].Fits() {
				fits = true
				break
			}
		}
		if !fits {
			rec.TooSmall = append(rec.TooSmall, k)
		}
	}
	// The headline replay is the largest card's: when even that is too
	// small, nothing is advised.
	rec.Best = lowest(rows, func(r *Row) bool { return r.Setting.Settable() && rec.Fits(r) })
	for i := range rows {
		r := &rows[i]
		if r.Setting.IsDefault() && r.Setting.Settable() && rec.Baseline == nil {
			rec.Baseline = r
		}
		if !r.Setting.Settable() && rec.Fits(r) && (rec.Best == nil || r.PeakReserved() < rec.Best.PeakReserved()) {
			rec.Unsettable = append(rec.Unsettable, r)
		}
	}
	if rec.Best != nil && rec.Baseline != nil {
		rec.Saved = rec.Baseline.PeakReserved() - rec.Best.PeakReserved()
		if p := rec.Baseline.PeakReserved(); p > 0 {
			rec.Percent = 100 * float64(rec.Saved) / float64(p)
		}
	}
	return rec
}
