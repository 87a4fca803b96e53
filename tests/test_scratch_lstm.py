"""The from-scratch LSTM's mathematics: gradients against finite differences and PyTorch autograd,
the optimisers and clipping against PyTorch's, and clear errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lstmnb.errors import ConfigError, DataError
from lstmnb.scratch import (
    Adam,
    LSTMShape,
    SGD,
    clip_grad_norm,
    init_params,
    loss_and_grad_loops,
    loss_and_grad_numpy,
    mse,
    unpack,
)
from lstmnb.scratch.torch_lstm import flat_params, torch_loss_and_grad, torch_model


def batch(shape: LSTMShape, n: int = 5, steps: int = 6, seed: int = 1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, steps, shape.n_features)), rng.normal(size=(n, shape.n_outputs))


@pytest.fixture
def problem():
    shape = LSTMShape(n_features=2, hidden=4, n_outputs=3)
    X, y = batch(shape)
    # larger weights than the default init, so every gate is away from its linear regime
    theta = init_params(shape, seed=3) * 3.0
    return shape, theta, X, y


def test_layout_covers_every_parameter_once():
    shape = LSTMShape(n_features=3, hidden=5, n_outputs=2)
    theta = np.arange(shape.n_params, dtype=np.float64)
    parts = unpack(theta, shape)
    assert [p.shape for p in parts.values()] == [(20, 3), (20, 5), (20,), (2, 5), (2,)]
    assert np.array_equal(np.concatenate([p.ravel() for p in parts.values()]), theta)
    assert np.shares_memory(parts["W_hh"], theta)  # views, not copies


def test_numpy_gradient_matches_finite_differences(problem):
    shape, theta, X, y = problem
    loss, grad = loss_and_grad_numpy(theta, X, y, shape)
    assert loss == pytest.approx(mse(theta, X, y, shape), rel=1e-14)
    eps = 1e-6
    numeric = np.empty_like(theta)
    for k in range(theta.size):
        e = np.zeros_like(theta)
        e[k] = eps
        numeric[k] = (mse(theta + e, X, y, shape) - mse(theta - e, X, y, shape)) / (2 * eps)
    rel = np.linalg.norm(numeric - grad) / np.linalg.norm(numeric + grad)
    assert rel < 1e-6
    # every parameter block gets a gradient (none silently zero)
    for name, block in unpack(grad, shape).items():
        assert np.abs(block).max() > 0, name


def test_numpy_gradient_equals_torch_autograd(problem):
    shape, theta, X, y = problem
    loss, grad = loss_and_grad_numpy(theta, X, y, shape)
    t_loss, t_grad = torch_loss_and_grad(theta, X, y, shape)
    assert loss == pytest.approx(t_loss, rel=1e-12)
    np.testing.assert_allclose(grad, t_grad, rtol=1e-10, atol=1e-13)


def test_torch_model_holds_the_same_weights(problem):
    shape, theta, X, _ = problem
    model = torch_model(theta, shape)
    np.testing.assert_array_equal(flat_params(model), theta)
    from lstmnb.scratch import predict

    with torch.no_grad():
        out = model(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(out, predict(theta, X, shape), rtol=1e-12, atol=1e-14)


def test_loops_equal_numpy(problem):
    shape, theta, X, y = problem
    loss, grad = loss_and_grad_numpy(theta, X, y, shape)
    l_loss, l_grad = loss_and_grad_loops(theta, X, y, shape)
    assert l_loss == pytest.approx(loss, rel=1e-13)
    np.testing.assert_allclose(l_grad, grad, rtol=1e-11, atol=1e-14)


def test_clipping_and_optimisers_match_torch():
    rng = np.random.default_rng(0)
    theta0 = rng.normal(size=50)
    grads = [rng.normal(size=50) * s for s in (5.0, 0.01, 3.0, 0.2)]
    for name, ours, theirs in (
        ("sgd", SGD(lr=0.1), lambda p: torch.optim.SGD([p], lr=0.1)),
        ("adam", Adam(lr=0.05), lambda p: torch.optim.Adam([p], lr=0.05)),
    ):
        theta = theta0.copy()
        p = torch.nn.Parameter(torch.from_numpy(theta0.copy()))
        opt = theirs(p)
        for g in grads:
            g_ours = g.copy()
            norm = clip_grad_norm(g_ours, 1.0)
            ours.step(theta, g_ours)
            p.grad = torch.from_numpy(g.copy())
            t_norm = torch.nn.utils.clip_grad_norm_([p], 1.0)
            opt.step()
            assert norm == pytest.approx(float(t_norm), rel=1e-12)
        np.testing.assert_allclose(theta, p.detach().numpy(), rtol=1e-12, atol=1e-14, err_msg=name)


def test_clipping_leaves_small_gradients_alone():
    g = np.array([0.3, 0.4])
    assert clip_grad_norm(g, 1.0) == pytest.approx(0.5)
    np.testing.assert_array_equal(g, [0.3, 0.4])
    g = np.array([3.0, 4.0])
    clip_grad_norm(g, 1.0)
    assert np.linalg.norm(g) == pytest.approx(1.0, rel=1e-6)


def test_bad_shapes_and_values_are_clear_errors(problem):
    from lstmnb.scratch.lstm import check_batch

    shape, theta, X, y = problem
    with pytest.raises(DataError, match="features per step"):
        check_batch(X[:, :, :1], y, shape)
    with pytest.raises(DataError, match="5 samples but y has 4"):
        check_batch(X, y[:4], shape)
    with pytest.raises(DataError, match=r"y must be \(samples, 3\)"):
        check_batch(X, y[:, :1], shape)
    with pytest.raises(DataError, match=r"X must be an array \(samples, window, features\)"):
        check_batch(X[0], y, shape)
    bad = X.copy()
    bad[2, 3, 1] = np.nan
    with pytest.raises(DataError, match=r"NaN or inf \(first at index \(2, 3, 1\)\)"):
        check_batch(bad, y, shape)
    with pytest.raises(ConfigError, match="flat vector of"):
        unpack(theta[:-1], shape)
    with pytest.raises(ConfigError, match="hidden=0"):
        LSTMShape(hidden=0)
    with pytest.raises(ConfigError, match="float64"):
        init_params(shape, dtype="float16")
