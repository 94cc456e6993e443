"""``CodeContract``: the behaviour every code owes its users, as a reusable base test case (gpytorch-style mixin).

Subclass it, named ``Test...``, and define ``make(self, **options) -> Code`` building the code under test with
``num_inputs=K``, ``num_workers=N`` and the :class:`torchgcc.Code` options passed. Every registered code, every
shipped decoder variant (each ``lambda_dec`` rule, the robust decoders, ``check=False``, ``nonfinite="straggle"``)
and a user-registered code run it through ``tests/test_code_contract.py``; a third-party code can run it from its
own tests the same way. A variant built with ``check=False`` is held to what that option promises instead of the
checks (``checked = False``).
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import torchgcc
from torchgcc.stragglers import FixedStragglers

K, N, S = 3, 8, 2


def contract_data(dtype: torch.dtype = torch.float64, groups: int = 3, seed: int = 0):
    """Smooth results ``(B, N, 2)`` (a code decodes them well), their ``(B, N)`` masks with S stragglers each, and
    inputs ``(B, K, 2)``."""
    generator = torch.Generator().manual_seed(seed)
    t = torch.linspace(-1, 1, N, dtype=torch.float64).unsqueeze(-1)
    phase = torch.rand(groups, 1, 2, generator=generator, dtype=torch.float64) * 3
    y = torch.sin(2 * t + phase) + 0.01 * torch.randn(groups, N, 2, generator=generator, dtype=torch.float64)
    x = torch.randn(groups, K, 2, generator=generator, dtype=torch.float64)
    return y.to(dtype), FixedStragglers(S, seed=seed).sample(groups, N), x.to(dtype)


class CodeContract:
    """Shapes, dtypes, empty batches, straggler NaN, device moves, pickling, state_dict and gradients."""

    #: Whether the code validates every decode (``check=True``, the default); False for ``check=False`` variants.
    checked = True

    def make(self, **options) -> torchgcc.Code:
        raise NotImplementedError

    def test_shapes(self):
        code = self.make()
        assert (code.num_inputs, code.num_workers) == (K, N)
        assert code.alpha.shape == (K,) and code.beta.shape == (N,) and code.alpha.dtype == torch.float64
        assert code.encoder(torch.randn(2, K, 4, 5)).shape == (2, N, 4, 5)
        assert code.decoder(torch.randn(2, N, 4, 5), torch.ones(2, N, dtype=torch.bool)).shape == (2, K, 4, 5)

    def test_matrices_are_b_k_n_and_reproduce_the_decode(self):
        code = self.make()
        y, mask, _ = contract_data()
        matrices = code.decoder.matrices(y, mask)
        assert matrices.shape == (len(mask), K, N) and matrices.dtype == torch.float64
        assert bool((matrices[~mask.unsqueeze(1).expand_as(matrices)] == 0).all())  # zero in straggler columns
        torch.testing.assert_close(code.decoder(y, mask), matrices @ y, rtol=1e-12, atol=1e-12)
        if code.decoder.depends_on_results:
            with pytest.raises(TypeError, match="depend on the results"):
                code.decoder.decode_matrix(mask)
        else:
            torch.testing.assert_close(code.decoder.decode_matrix(mask), matrices, rtol=0, atol=0)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
    def test_dtypes_follow_the_input_at_its_precision(self, dtype):
        code = self.make()
        y, mask, x = contract_data(dtype)
        eps = torch.finfo(dtype).eps
        for got, reference in (
            (code.encoder(x), code.encoder(x.double())),
            (code.decoder(y, mask), code.decoder(y.double(), mask)),
        ):
            assert got.dtype == dtype
            # float16/bfloat16: rounding to dtype (half an ulp) plus the float32 accumulation, allowed a tenth of an
            # ulp of the largest value; float32/float64 accumulate in their own dtype: up to N ulps of it
            floor = 0.1 if dtype in (torch.float16, torch.bfloat16) else N
            bound = eps * (reference.abs() + floor * reference.abs().max())
            assert bool(((got.double() - reference).abs() <= bound).all())

    def test_too_few_arrived_results(self):
        """Below ``min_arrived``: one clear error with checks; with ``check=False`` no error and no read back (the
        estimates of such a group are unspecified)."""
        code = self.make()
        y, mask, _ = contract_data()
        mask[1] = False
        mask[1, : code.min_arrived - 1] = True
        if self.checked:
            with pytest.raises(ValueError, match=f"group 1 has {code.min_arrived - 1} arrived results"):
                code.decoder(y, mask)
        else:
            assert code.decoder(y, mask).shape == (len(mask), K, 2)

    def test_empty_batch_raises_value_error(self):
        code = self.make()
        with pytest.raises(ValueError, match=r"B = 0"):
            code.encoder(torch.randn(0, K, 2))
        with pytest.raises(ValueError, match=r"B = 0"):
            code.decoder(torch.randn(0, N, 2), torch.ones(0, N, dtype=torch.bool))

    @pytest.mark.parametrize("poison", [float("nan"), float("inf")])
    def test_values_at_stragglers_never_leak(self, poison):
        """With checks a NaN/Inf at a straggler never reaches the estimates; with ``check=False`` (no read back) it
        makes exactly its own group's estimates non-finite, as documented."""
        code = self.make()
        y, mask, _ = contract_data()
        poisoned = y.clone()
        poisoned[0][~mask[0]] = poison
        out = code.decoder(poisoned, mask)
        clean = code.decoder(y, mask)
        if self.checked:
            torch.testing.assert_close(out, clean, rtol=0, atol=0)
        else:
            assert not bool(torch.isfinite(out[0]).all())
            torch.testing.assert_close(out[1:], clean[1:], rtol=0, atol=0)

    def test_device_moves_keep_float64_points(self):
        code = self.make()
        y, mask, _ = contract_data()
        expected = code.decoder(y, mask)
        moved = copy.deepcopy(code).to("meta")
        assert moved.alpha.device.type == "meta" and moved.alpha.dtype == torch.float64
        code.half().to("cpu")  # casting along with a float16 model must not round the points
        assert code.alpha.dtype == torch.float64 and code.encoder.matrix.dtype == torch.float64
        torch.testing.assert_close(code.decoder(y, mask), expected, rtol=0, atol=0)

    @pytest.mark.cuda
    def test_cuda_decode_matches_cpu(self):
        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
        code = self.make()
        y, mask, _ = contract_data()
        torch.testing.assert_close(
            copy.deepcopy(code).cuda().decoder(y.cuda(), mask.cuda()).cpu(),
            code.decoder(y, mask),
            rtol=1e-10,
            atol=1e-10,
        )

    def test_pickling_round_trips(self):
        code = self.make()
        y, mask, _ = contract_data()
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
        y, mask, x = contract_data()
        torch.testing.assert_close(fresh(x, mask), code(x, mask), rtol=0, atol=0)

    def test_gradcheck_with_respect_to_the_results(self):
        code = self.make()
        y, mask, x = contract_data(groups=2)
        y.requires_grad_(True)
        x.requires_grad_(True)
        assert torch.autograd.gradcheck(lambda results: code.decoder(results, mask), (y,))
        assert torch.autograd.gradcheck(code.encoder, (x,))
