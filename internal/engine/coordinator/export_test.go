package coordinator

import (
	"context"

	"github.com/cdcctl/cdcctl/internal/engine/election"
	"github.com/cdcctl/cdcctl/internal/engine/meta"
	"github.com/cdcctl/cdcctl/internal/model"
)

// Refollow is refollow, for the tests outside the package.
func (c *Coordinator) Refollow(ctx context.Context, term election.Term, read *meta.ChangefeedEntry, by string, steps ...[]string) error {
	return c.refollow(ctx, term, read, by, nil, steps...)
}

// ErrMovedOn is errMovedOn, for the tests outside the package.
var ErrMovedOn = errMovedOn

// FinishRefollow is finishRefollow, for the tests outside the package.
func (c *Coordinator) FinishRefollow(ctx context.Context, term election.Term, id model.ChangefeedID, r model.Refollow) error {
	return c.finishRefollow(ctx, term, id, r, true)
}
