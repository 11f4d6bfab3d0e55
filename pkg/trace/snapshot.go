package trace

import (
	"github.com/gpumem/gpumem/pkg/trace/model"
	"github.com/gpumem/gpumem/pkg/trace/pickle"
)

// The trace model lives in package model so that the pickle reader, a
// package of its own, can fill it in; these aliases keep its names here.
type (
	Action     = model.Action
	Event      = model.Event
	BlockState = model.BlockState
	Block      = model.Block
	Segment    = model.Segment
	Settings   = model.Settings
	Frame      = model.Frame
	Annotation = model.Annotation
	Snapshot   = model.Snapshot

	// FormatError reports a malformed snapshot pickle.
	FormatError = pickle.FormatError
	// PickleSink takes what StreamPickle reads as it reads it.
	PickleSink = pickle.Sink
)

// Event actions (see model.Action).
const (
	ActionAlloc         = model.ActionAlloc
	ActionFreeRequested = model.ActionFreeRequested
	ActionFreeCompleted = model.ActionFreeCompleted
	ActionSegmentAlloc  = model.ActionSegmentAlloc
	ActionSegmentFree   = model.ActionSegmentFree
	ActionSegmentMap    = model.ActionSegmentMap
	ActionSegmentUnmap  = model.ActionSegmentUnmap
	ActionOOM           = model.ActionOOM
	ActionSnapshot      = model.ActionSnapshot
	ActionEmptyCache    = model.ActionEmptyCache
)

// Block states (see model.BlockState).
const (
	BlockInactive    = model.BlockInactive
	BlockAllocated   = model.BlockAllocated
	BlockPendingFree = model.BlockPendingFree
)
