package criteria_test

import (
	"fmt"
	"testing"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	pvcel "buf.build/go/protovalidate/cel"
	"cel.dev/cel-go/cel"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// criteriaSet is n HUMAN_VERIFY criteria with distinct ids (the cheapest valid criteria).
func criteriaSet(n int) *verifierv1.CriteriaSet {
	set := &verifierv1.CriteriaSet{}
	for i := range n {
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{
			Id: fmt.Sprintf("C%d", i), Name: "x", Tag: verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY,
		})
	}
	return set
}

// uniqueIDsCost evaluates the contract's criteria.unique_ids rule on set with CEL's cost
// tracking and answers its cost: a count of CEL operations, not a time.
func uniqueIDsCost(t testing.TB, set *verifierv1.CriteriaSet) uint64 {
	t.Helper()
	rules := proto.GetExtension(set.ProtoReflect().Descriptor().Options(), validatepb.E_Message).(*validatepb.MessageRules)
	var expr string
	for _, r := range rules.GetCel() {
		if r.GetId() == "criteria.unique_ids" {
			expr = r.GetExpression()
		}
	}
	require.NotEmpty(t, expr, "the contract has the criteria.unique_ids rule")
	env, err := cel.NewEnv(cel.Lib(pvcel.NewLibrary()), cel.Types(set), cel.Variable("this", cel.ObjectType(string(set.ProtoReflect().Descriptor().FullName()))))
	require.NoError(t, err)
	ast, iss := env.Compile(expr)
	require.NoError(t, iss.Err())
	prg, err := env.Program(ast, cel.CostTracking(nil))
	require.NoError(t, err)
	out, det, err := prg.Eval(map[string]any{"this": set})
	require.NoError(t, err)
	require.Equal(t, true, out.Value())
	return *det.ActualCost()
}

// The duplicate-id rule is linear in the number of criteria (a set), and an oversized list does
// not pay for it at all: the rule's CEL cost (operations counted by CEL, not time) doubles when
// the criteria double, and 8,000 criteria cost less than 500. Under the old rule
// (all/exists_one) the cost quadrupled and 8,000 criteria cost 256 times 500's.
func TestUniqueIDsRuleIsLinearAndSkippedOverMaxItems(t *testing.T) {
	t.Parallel()
	c250, c500 := uniqueIDsCost(t, criteriaSet(250)), uniqueIDsCost(t, criteriaSet(500))
	require.Less(t, c500, 3*c250, "doubling the criteria at most ~doubles the rule's cost (250: %d, 500: %d)", c250, c500)
	c8000 := uniqueIDsCost(t, criteriaSet(8000))
	require.Less(t, c8000, c500, "over max_items the rule is skipped (500: %d, 8000: %d)", c500, c8000)

	// And the validation of 8,000 criteria answers max_items.
	v, err := protovalidate.New()
	require.NoError(t, err)
	err = v.Validate(&verifierv1.VerifyRequest{LoopKey: "l", CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: criteriaSet(8000)}})
	require.ErrorContains(t, err, "criteria.criteria")
	require.ErrorContains(t, err, "500")
}

// BenchmarkValidateCriteria validates criteria sets of growing size: the time grows linearly
// up to max_items (500) and an oversized set is refused without the duplicate check.
func BenchmarkValidateCriteria(b *testing.B) {
	v, err := protovalidate.New()
	require.NoError(b, err)
	for _, n := range []int{250, 500, 8000} {
		set := criteriaSet(n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				_ = v.Validate(set)
			}
		})
	}
}
