package knowledge

import (
	"context"

	"github.com/converge-dev/converge/platform/auth"
)

// Who recorded and who confirmed an item is the authenticated principal of the call, never a
// field of the request (Source names the execution, task and agent, which the caller asserts).
//
//   - A server that authenticates nobody (converge dev without a token) trusts every caller:
//     items are recorded by "" and are not provisional.
//   - An operator's items are trusted: not provisional.
//   - Anyone else's items are provisional: their confidence is capped at
//     confidence.UnconfirmedCap, below the agents' injection threshold, until a principal other
//     than the recorder confirms them (ConfirmItem, or RecordItem of the twin).

// recorder answers the recorder of an item recorded in ctx's call, and whether it is provisional.
func recorder(ctx context.Context) (by string, provisional bool) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return "", false
	}
	return p.Name, !p.Has(auth.RoleOperator)
}

// confirmer answers the principal confirming an item in ctx's call ("" when the server
// authenticates nobody, which lifts any cap: such a server trusts every caller).
func confirmer(ctx context.Context) string {
	p, _ := auth.FromContext(ctx)
	return p.Name
}
