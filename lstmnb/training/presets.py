"""The named settings a run can start from (``--preset``): what each changes from TrainConfig's defaults, and
where it comes from, with the rules lstmnb keeps instead of its source's (stated in every record's config)."""

from __future__ import annotations

from typing import Any

from ..datasets.study import STUDY_TEST_START

# Named settings. TrainConfig's defaults are the recommended one; a preset lists what it changes.
PRESETS: dict[str, dict[str, Any]] = {
    # measured on the synthetic sample and the study's real ERA5 (README, "Skill at every point"): residual head, calendar
    # inputs, batch 256, Adam 4e-3 on the fast path, up to 30 epochs with early stopping on validation; each
    # point's fitted cycles as an input, the loss weighted by each point's persistence error, and the reported
    # forecast blended per point with persistence and climatology on validation
    # (the learning rate by lead: see LR_BY_LEAD)
    "recommended": {},
    # the study's setting as its notebooks ran it (PRESET_SOURCES; ../shared/DESIGN.md): nn.LSTM(1, 64,
    # num_layers=2) + Linear on the last step, windows of 24 h -> the next hour, batch 128 from a shuffled
    # per-sample Dataset + DataLoader with 2 workers (the DataLoader's defaults: pageable memory, workers started
    # afresh every epoch), Adam 1e-3 (plain), MSE, 5 fixed epochs, trained on the hours before 2021-01-01 and
    # tested from then on, no validation part; and its code's costs: each sample's tensors made in __getitem__,
    # glibc's default heap, the loss read back every step, no CUDA graph (rung 0 of the ladder, lstmnb/rungs.py)
    "published": dict(epochs=5, patience=None, batch_size=128, hidden=64, layers=2, window=24, lead_hours=1,
                      horizon=1, lr=1e-3, lr_schedule="constant", weight_decay=0.0, residual=False, calendar=False,
                      cycles=False, input_path="dataloader", num_workers=2, pin_memory=False,
                      persistent_workers=False, fused_adam=False, point_weights="none",
                      blend="off", split_dates=(STUDY_TEST_START, STUDY_TEST_START),
                      sample_tensors="per_sample", heap="system", loss_every=1, cuda_graph=False),
}

# Where a preset's setting comes from, and where lstmnb keeps one of its own rules instead of the source's
# (stated once in the record's config and in the report).
PRESET_SOURCES: dict[str, dict[str, Any]] = {
    "recommended": {"source": "measured by lstmnb (README, 'Skill at every point'; benchmarks/train_speed.py)",
                    "differences": []},
    "published": {
        "source": "the study's notebook Parallel_LSTM_Model_run_CARC.ipynb (github.com/yxie7333/cs596final; the "
                  "Colab run gpu_run.ipynb uses 4 DataLoader workers)",
        "differences": [
            "scaling: one mean and std over both points, fitted on the training part (std 9.91 K; the study fitted "
            "them over the whole file, test hours included: 10.01 K over the CARC notebook's 2020-2021 file, "
            "10.33 K over the Colab notebook's 2020-01..2021-06), so for the same error in kelvin lstmnb's scaled "
            "training loss is 2% (CARC) or 9% (Colab) above the study's",
            "windows stay within a point: 17,520 training samples per epoch (the study joined the two series end "
            "to end, so 24 of its 17,544 windows span both points)",
            "test windows may take inputs from the last hours of 2020 (the study windowed the test part alone): "
            "every model and baseline is scored on every hour of 2021-01..06 (the study computed no test metric, "
            "it plotted its forecasts; the CARC notebook's test part was the whole of 2021)",
            "the epoch's training loss is the mean over samples (the study's: the mean over batches, its last "
            "batch of 8 counting as much as a full one)",
            "timing: lstmnb times the epochs alone; the CARC notebook's clock also spans creating the model and "
            "moving it to the device (CUDA start-up on a GPU) and the pause between that cell and the epoch "
            "loop's (the Colab notebook timed the epoch loop)",
            "one device, unwrapped, as on CARC (1 GPU); the Colab notebook wrapped the model in nn.DataParallel "
            "whenever a GPU was visible, one GPU included",
        ],
    },
}
