"""``CodeContract``: the behaviour every code owes its users, as a reusable base test case (as gpytorch ships
``BaseKernelTestCase``).

Subclass it, named ``Test...``, and define ``make(self, **options) -> Code`` building the code under test with
``num_inputs=self.num_inputs``, ``num_workers=self.num_workers`` and the :class:`torchgcc.Code` options passed.
Every registered code, every shipped decoder variant (each ``lambda_dec`` rule, the robust decoders, ``check=False``,
``nonfinite="straggle"``) and the user-registered code of docs/api.md run it in ``tests/test_code_contract.py``; a
third-party code runs it from its own tests the same way. A variant built with ``check=False`` is held to what that
option promises instead of the checks (``checked = False``).
"""

from __future__ import annotations

import copy
import pickle
import unittest

import torch

from torchgcc.codes import Code
from torchgcc.stragglers import FixedStragglers

__all__ = ["CodeContract", "contract_data"]

#: K, N and the stragglers per group of the contract's data.
K, N, S = 3, 8, 2

# unittest's assertRaisesRegex, without making the contract a TestCase (pytest collects plain classes).
_ASSERT = unittest.TestCase()


def contract_data(code: Code, dtype: torch.dtype = torch.float64, groups: int = 3, seed: int = 0):
    """Smooth results ``(B, N, 2)`` (a code decodes them well), ``(B, N)`` masks the code decodes (S stragglers each,
    or none in a group whose draw it cannot decode: with S = 2 of N = 8 that happens only for codes that need a
    particular worker, such as replication and uncoded), and inputs ``(B, K, 2)``, for ``code``'s K and N."""
    k, n = code.num_inputs, code.num_workers
    generator = torch.Generator().manual_seed(seed)
    t = torch.linspace(-1, 1, n, dtype=torch.float64).unsqueeze(-1)
    phase = torch.rand(groups, 1, 2, generator=generator, dtype=torch.float64) * 3
    y = torch.sin(2 * t + phase) + 0.01 * torch.randn(groups, n, 2, generator=generator, dtype=torch.float64)
    x = torch.randn(groups, k, 2, generator=generator, dtype=torch.float64)
    mask = FixedStragglers(min(S, n - 1), seed=seed).sample(groups, n)
    mask[~code.decodable(mask)] = True
    return y.to(dtype), mask, x.to(dtype)


class CodeContract:
    """Shapes, dtypes, empty batches, straggler NaN, undecodable masks, device moves, pickling, state_dict and
    gradients, for a code of K = ``num_inputs`` inputs on N = ``num_workers`` workers."""

    #: Whether the code validates every decode (``check=True``, the default); False for ``check=False`` variants.
    checked = True
    #: K and N of the code :meth:`make` builds (a code whose N follows from K, such as uncoded, sets both).
    num_inputs, num_workers = K, N

    def make(self, **options) -> Code:
        """The code under test, for K = ``self.num_inputs`` and N = ``self.num_workers``, with ``options`` (the
        :class:`torchgcc.Code` options) passed on."""
        raise NotImplementedError("a CodeContract subclass defines make(self, **options)")

    def test_shapes(self):
        code = self.make()
        k, n = self.num_inputs, self.num_workers
        assert (code.num_inputs, code.num_workers) == (k, n)
        assert code.alpha.shape == (k,) and code.beta.shape == (n,) and code.alpha.dtype == torch.float64
        assert code.encoder(torch.randn(2, k, 4, 5)).shape == (2, n, 4, 5)
        assert code.decoder(torch.randn(2, n, 4, 5), torch.ones(2, n, dtype=torch.bool)).shape == (2, k, 4, 5)

    def test_matrices_are_b_k_n_and_reproduce_the_decode(self):
        code = self.make()
        y, mask, _ = contract_data(code)
        matrices = code.decoder.matrices(y, mask)
        assert matrices.shape == (len(mask), self.num_inputs, self.num_workers) and matrices.dtype == torch.float64
        assert bool((matrices[~mask.unsqueeze(1).expand_as(matrices)] == 0).all())  # zero in straggler columns
        torch.testing.assert_close(code.decoder(y, mask), matrices @ y, rtol=1e-12, atol=1e-12)
        if code.decoder.depends_on_results:
            with _ASSERT.assertRaisesRegex(TypeError, "depend on the results"):
                code.decoder.decode_matrix(mask)
        else:
            torch.testing.assert_close(code.decoder.decode_matrix(mask), matrices, rtol=0, atol=0)

    def test_decodable_is_one_flag_per_group_and_says_which_groups_decode(self):
        """``decodable(mask)`` is ``(B,)`` bool; every estimate of a decodable group is finite, and every group it
        cannot decode raises (checked) or has a NaN estimate: never a finite guess passed off as a decode."""
        code = self.make()
        n = self.num_workers
        masks = torch.cat([FixedStragglers(s, seed=s).sample(4, n) for s in range(n)])  # 0 .. N - 1 stragglers
        y = torch.randn(len(masks), n, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        decodable = code.decodable(masks)
        assert decodable.dtype == torch.bool and decodable.shape == (len(masks),)
        assert bool(decodable[:4].all())  # every worker arrived
        assert bool(torch.isfinite(code.decoder(y[decodable], masks[decodable])).all())
        for group in (~decodable).nonzero().flatten().tolist():
            try:
                estimate = code.decoder(y[group : group + 1], masks[group : group + 1])
            except ValueError:
                assert self.checked
                continue
            assert not bool(torch.isfinite(estimate).all())

    def test_dtypes_follow_the_input_at_its_precision(self):
        code = self.make()
        for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            y, mask, x = contract_data(code, dtype)
            eps = torch.finfo(dtype).eps
            for got, reference in (
                (code.encoder(x), code.encoder(x.double())),
                (code.decoder(y, mask), code.decoder(y.double(), mask)),
            ):
                assert got.dtype == dtype
                # float16/bfloat16: rounding to dtype (half an ulp) plus the float32 accumulation, allowed a tenth of
                # an ulp of the largest value; float32/float64 accumulate in their own dtype: up to N ulps of it
                floor = 0.1 if dtype in (torch.float16, torch.bfloat16) else self.num_workers
                bound = eps * (reference.abs() + floor * reference.abs().max())
                assert bool(((got.double() - reference).abs() <= bound).all()), f"{dtype}: beyond its precision"

    def test_too_few_arrived_results(self):
        """Below ``min_arrived``: one clear error with checks; with ``check=False`` no error and no read back (the
        estimates of such a group are unspecified)."""
        code = self.make()
        y, mask, _ = contract_data(code)
        mask[1] = False
        mask[1, : code.min_arrived - 1] = True
        if self.checked:
            with _ASSERT.assertRaisesRegex(ValueError, f"group 1 has {code.min_arrived - 1} arrived results"):
                code.decoder(y, mask)
        else:
            assert code.decoder(y, mask).shape == (len(mask), self.num_inputs, 2)

    def test_empty_batch_raises_value_error(self):
        code = self.make()
        k, n = self.num_inputs, self.num_workers
        with _ASSERT.assertRaisesRegex(ValueError, r"B = 0"):
            code.encoder(torch.randn(0, k, 2))
        with _ASSERT.assertRaisesRegex(ValueError, r"B = 0"):
            code.decoder(torch.randn(0, n, 2), torch.ones(0, n, dtype=torch.bool))

    def test_values_at_stragglers_never_leak(self):
        """With checks a NaN/Inf at a straggler never reaches the estimates (the masks have S stragglers in every
        group, also where the code cannot decode all of it: those estimates are NaN with and without the poison);
        with ``check=False`` (no read back) it makes exactly its own group's estimates non-finite, as documented."""
        code = self.make()
        y, _, _ = contract_data(code)
        mask = FixedStragglers(min(S, self.num_workers - 1), seed=0).sample(len(y), self.num_workers)
        clean = code.decoder(y, mask)
        assert bool(torch.isfinite(clean[code.decodable(mask)]).all())
        for poison in (float("nan"), float("inf")):
            poisoned = y.clone()
            poisoned[0][~mask[0]] = poison
            out = code.decoder(poisoned, mask)
            if self.checked:
                torch.testing.assert_close(out, clean, rtol=0, atol=0, equal_nan=True, msg=f"{poison} leaked")
            else:
                assert not bool(torch.isfinite(out[0]).all())
                torch.testing.assert_close(out[1:], clean[1:], rtol=0, atol=0)

    def test_device_moves_keep_float64_points(self):
        code = self.make()
        y, mask, _ = contract_data(code)
        expected = code.decoder(y, mask)
        moved = copy.deepcopy(code).to("meta")
        assert moved.alpha.device.type == "meta" and moved.alpha.dtype == torch.float64
        code.half().to("cpu")  # casting along with a float16 model must not round the points
        assert code.alpha.dtype == torch.float64 and code.encoder.matrix.dtype == torch.float64
        torch.testing.assert_close(code.decoder(y, mask), expected, rtol=0, atol=0)

    def test_cuda_decode_matches_cpu(self):
        if not torch.cuda.is_available():
            raise unittest.SkipTest("needs a CUDA device")  # pytest reports it as skipped too
        code = self.make()
        y, mask, _ = contract_data(code)
        torch.testing.assert_close(
            copy.deepcopy(code).cuda().decoder(y.cuda(), mask.cuda()).cpu(),
            code.decoder(y, mask),
            rtol=1e-10,
            atol=1e-10,
        )

    def test_pickling_round_trips(self):
        code = self.make()
        y, mask, _ = contract_data(code)
        expected = code.decoder(y, mask)
        restored = pickle.loads(pickle.dumps(code))
        torch.testing.assert_close(restored.decoder(y, mask), expected, rtol=0, atol=0)

    def test_state_dict_round_trips(self):
        code = self.make()
        state = code.state_dict()
        assert all(isinstance(value, torch.Tensor) for value in state.values())
        fresh = self.make()
        for value in fresh.state_dict().values():
            value.zero_()  # the loaded state, not the constructor, must set the buffers
        fresh.load_state_dict(state)
        for key, value in fresh.state_dict().items():
            torch.testing.assert_close(value, state[key], rtol=0, atol=0, equal_nan=True)  # NaN: not calibrated
        y, mask, x = contract_data(code)
        torch.testing.assert_close(fresh(x, mask), code(x, mask), rtol=0, atol=0)

    def test_gradcheck_with_respect_to_the_results(self):
        code = self.make()
        y, mask, x = contract_data(code, groups=2)
        y.requires_grad_(True)
        x.requires_grad_(True)
        assert torch.autograd.gradcheck(lambda results: code.decoder(results, mask), (y,))
        assert torch.autograd.gradcheck(code.encoder, (x,))
