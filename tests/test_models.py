"""Model shapes, parameter counts and FLOPs by hand."""

import pytest
import torch

from lstmnb.errors import ConfigError
from lstmnb.models import Forecaster, ModelConfig, count_parameters, flops_per_sample


def test_forward_shape_and_parameter_count():
    cfg = ModelConfig(n_features=3, hidden=8, layers=2, horizon=4, dropout=0.1)
    m = Forecaster(cfg)
    assert m(torch.randn(5, 12, 3)).shape == (5, 4)
    # LSTM layer: 4H(I+H) weights + 2*4H biases; head: H*horizon + horizon
    expected = (4 * 8 * (3 + 8) + 8 * 8) + (4 * 8 * (8 + 8) + 8 * 8) + (8 * 4 + 4)
    assert count_parameters(m) == expected


def test_gru_option():
    m = Forecaster(ModelConfig(n_features=1, hidden=4, cell="gru"))
    assert m(torch.randn(2, 6, 1)).shape == (2, 1)
    assert count_parameters(m) == (3 * 4 * (1 + 4) + 6 * 4) + (4 + 1)


def test_flops_hand_count_small_lstm():
    # I=1, H=2, T=3, one layer, horizon 1.
    # per step: gate matmuls 2*4*2*(1+2)=48, biases 2*4*2=16, state update 4*2=8 -> 72; x3 steps = 216
    # head: 2*2*1 + 1 = 5 -> forward 221; training = 3 x forward = 663
    f = flops_per_sample(ModelConfig(n_features=1, hidden=2, horizon=1), window=3)
    assert f == {"forward": 221, "training": 663}


def test_flops_two_layers_counts_second_layer_input_as_hidden():
    one = flops_per_sample(ModelConfig(n_features=1, hidden=2), window=3)["forward"]
    two = flops_per_sample(ModelConfig(n_features=1, hidden=2, layers=2), window=3)["forward"]
    # layer 2 has input size H=2: per step 2*4*2*4 + 16 + 8 = 88, x3 = 264
    assert two - one == 264


@pytest.mark.parametrize("kw, match", [({"cell": "rnn"}, "cell='rnn'"), ({"hidden": 0}, "hidden=0"),
                                      ({"dropout": 1.5}, "dropout=1.5")])
def test_bad_model_config(kw, match):
    with pytest.raises(ConfigError, match=match):
        Forecaster(ModelConfig(**kw))


def test_residual_head_starts_from_persistence():
    torch.manual_seed(0)
    m = Forecaster(ModelConfig(n_features=2, hidden=4, residual=True, horizon=3))
    torch.nn.init.zeros_(m.head.weight)
    torch.nn.init.zeros_(m.head.bias)
    x = torch.randn(5, 7, 2)
    # with a zero head the forecast is the last observed target value, for every horizon step
    torch.testing.assert_close(m(x), x[:, -1, :1].expand(5, 3))
