// Command converge-knowledge runs the converge Knowledge service on its own: the gotcha knowledge base.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"context"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
)

func main() { servicecmd.Main(module()) }

func module() servicecmd.Module {
	return servicecmd.Module{
		Name:   "knowledge",
		Short:  "converge Knowledge service: the gotcha knowledge base",
		Listen: "127.0.0.1:7073",
		Needs:  servicecmd.NeedsPostgres,
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			st, err := postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
			if err != nil {
				return servicecmd.Built{}, err
			}
			return servicecmd.Built{
				Desc:  &server.Service{Desc: &knowledgev1.KnowledgeService_ServiceDesc, Impl: knowledge.New(st)},
				Store: st,
				Close: func() { _ = st.Close() },
			}, nil
		},
	}
}
