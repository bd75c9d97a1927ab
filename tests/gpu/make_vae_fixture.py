#!/usr/bin/env python3
"""make_vae_fixture.py - PyTorch reference for the LightVAE (engine/model.h), as a test fixture.

Builds the network in PyTorch, sets its weights from a fixed seed, runs a batch of seeded
synthetic beats (float32-representable values) in float64 on the CPU with a fixed eps for the
reparameterisation, and writes weights, inputs, eps, outputs (mu, logvar, recon, recon at mu,
loss and its parts) and every parameter gradient to a little-endian binary file that
tests/unit/test_vae.c reads. Also runs the same batch in float32 on a GPU when there is one
(TF32 off) and prints how far it lies from the float64 reference (information only).

Usage: python3 tests/gpu/make_vae_fixture.py OUT.bin
Needs PyTorch only (no numpy). Layout of OUT.bin (all little-endian):
  char[8] "VAEFIX01"
  u32 beat_len, latent_dim, enc[3], dec[3], batch, n_weights
  f64 kl_weight
  f64 weights[n_weights]   (engine/model.h order)
  f64 x[batch][beat_len]
  f64 eps[batch][latent_dim]
  f64 mu[batch][latent_dim], logvar[batch][latent_dim]
  f64 recon[batch][beat_len]      decoder(mu + exp(logvar/2) * eps)
  f64 recon_mu[batch][beat_len]   decoder(mu)
  f64 loss, recon_mse, kl         loss = mse(recon, x) + kl_weight * mean_b KL_b
  f64 grad[n_weights]             d loss / d weights, same order
"""
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

BEAT_LEN = 256
LATENT = 2
ENC = (4, 8, 16)
DEC = (8, 4, 2)
BATCH = 8
KL_WEIGHT = 0.1
SEED = 20240611


class Swish(nn.Module):
    """x * sigmoid(alpha * x) with one learnable scalar alpha per layer."""

    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * torch.sigmoid(self.alpha * x)


class Blur(nn.Module):
    """Fixed depthwise [1, 2, 1] / 4, stride 2, zero padding 1."""

    def __init__(self, channels):
        super().__init__()
        k = torch.tensor([1.0, 2.0, 1.0]) / 4.0
        self.register_buffer("k", k.view(1, 1, 3).repeat(channels, 1, 1))
        self.channels = channels

    def forward(self, x):
        return F.conv1d(x, self.k, stride=2, padding=1, groups=self.channels)


class LightVAE(nn.Module):
    def __init__(self, beat_len=BEAT_LEN, latent=LATENT, enc=ENC, dec=DEC):
        super().__init__()
        self.beat_len, self.dec0 = beat_len, dec[0]
        self.enc_conv = nn.ModuleList()
        self.enc_act = nn.ModuleList()
        self.enc_blur = nn.ModuleList()
        cin = 1
        for c in enc:
            self.enc_conv.append(nn.Conv1d(cin, c, 3, padding=1))
            self.enc_act.append(Swish())
            self.enc_blur.append(Blur(c))
            cin = c
        self.mu_head = nn.Conv1d(cin, latent, 3, padding=1)
        self.logvar_head = nn.Conv1d(cin, latent, 3, padding=1)
        self.fc = nn.Linear(latent, dec[0] * (beat_len // 8))
        self.dec_conv = nn.ModuleList(
            [nn.Conv1d(dec[0], dec[1], 3, padding=1), nn.Conv1d(dec[1], dec[2], 3, padding=1),
             nn.Conv1d(dec[2], 1, 3, padding=1)])
        self.dec_act = nn.ModuleList([Swish(), Swish()])

    def encode(self, x):
        h = x.unsqueeze(1)
        for conv, act, blur in zip(self.enc_conv, self.enc_act, self.enc_blur):
            h = blur(act(conv(h)))
        return self.mu_head(h).mean(-1), self.logvar_head(h).mean(-1)

    def decode(self, z):
        h = self.fc(z).view(-1, self.dec0, self.beat_len // 8)
        for i, conv in enumerate(self.dec_conv):
            h = F.interpolate(h, scale_factor=2, mode="nearest")
            h = conv(h)
            if i < 2:
                h = self.dec_act[i](h)
        return h.squeeze(1)

    def ordered_params(self):
        """Parameters in the order of engine/model.h."""
        out = []
        for conv, act in zip(self.enc_conv, self.enc_act):
            out += [conv.weight, conv.bias, act.alpha]
        out += [self.mu_head.weight, self.mu_head.bias, self.logvar_head.weight,
                self.logvar_head.bias, self.fc.weight, self.fc.bias]
        for i, conv in enumerate(self.dec_conv):
            out += [conv.weight, conv.bias]
            if i < 2:
                out.append(self.dec_act[i].alpha)
        return out


def synthetic_beats(gen, n, length):
    """ECG-like beats: P, QRS and T bumps at random places, a zero-padded tail, noise."""
    t = torch.arange(length, dtype=torch.float64)
    rows = []
    for _ in range(n):
        u = torch.rand(12, generator=gen, dtype=torch.float64)
        beat_len = int(100 + u[0] * 156)
        r_pos = 50 + u[1] * 20
        qrs_w = 2.5 + u[2] * 6
        row = (6 + 4 * u[3]) * torch.exp(-0.5 * ((t - r_pos) / qrs_w) ** 2)
        row -= (1 + u[4]) * torch.exp(-0.5 * ((t - r_pos - 3 * qrs_w) / 3) ** 2)
        row += (0.5 + u[5]) * torch.exp(-0.5 * ((t - r_pos + 35 + 10 * u[6]) / 6) ** 2)
        row += (1 + 2 * u[7]) * torch.exp(-0.5 * ((t - r_pos - 70 - 30 * u[8]) / 14) ** 2)
        row += 0.1 * torch.randn(length, generator=gen, dtype=torch.float64)
        row += 0.3 * (u[9] - 0.5)
        row[beat_len:] = 0
        rows.append(row)
    # float32-representable, like the engine's embeddings
    return torch.stack(rows).float().double()


def run(model, x, eps):
    model.zero_grad()
    mu, logvar = model.encode(x)
    z = mu + torch.exp(0.5 * logvar) * eps
    recon = model.decode(z)
    recon_mse = F.mse_loss(recon, x, reduction="mean")
    kl = (-0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum(-1)).mean()
    loss = recon_mse + KL_WEIGHT * kl
    loss.backward()
    with torch.no_grad():
        recon_mu = model.decode(mu)
    grads = [p.grad.detach().reshape(-1) for p in model.ordered_params()]
    return dict(mu=mu.detach(), logvar=logvar.detach(), recon=recon.detach(), recon_mu=recon_mu,
                loss=loss.item(), recon_mse=recon_mse.item(), kl=kl.item(),
                grad=torch.cat(grads))


def f64s(values):
    flat = [float(v) for v in values.reshape(-1).tolist()] if torch.is_tensor(values) else values
    return struct.pack("<%dd" % len(flat), *flat)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_vae_fixture.py OUT.bin")
    torch.manual_seed(SEED)
    model = LightVAE()  # default PyTorch initialisation, float32
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for act in list(model.enc_act) + list(model.dec_act):
            act.alpha.fill_(0.5 + torch.rand((), generator=gen).item())
    model = model.double()
    x = synthetic_beats(gen, BATCH, BEAT_LEN)
    eps = torch.randn(BATCH, LATENT, generator=gen).float().double()
    weights = torch.cat([p.detach().reshape(-1) for p in model.ordered_params()])
    ref = run(model, x, eps)

    out = bytearray(b"VAEFIX01")
    out += struct.pack("<10I", BEAT_LEN, LATENT, *ENC, *DEC, BATCH, weights.numel())
    out += struct.pack("<d", KL_WEIGHT)
    for t in (weights, x, eps, ref["mu"], ref["logvar"], ref["recon"], ref["recon_mu"]):
        out += f64s(t)
    out += struct.pack("<3d", ref["loss"], ref["recon_mse"], ref["kl"])
    out += f64s(ref["grad"])
    with open(sys.argv[1], "wb") as f:
        f.write(out)
    print("wrote %s: %d bytes, %d weights, loss %.12g (mse %.12g, kl %.12g)" %
          (sys.argv[1], len(out), weights.numel(), ref["loss"], ref["recon_mse"], ref["kl"]))
    print("torch", torch.__version__)

    # information only: the same batch in float32 on the GPU, TF32 off
    try:
        if not torch.cuda.is_available():
            print("no CUDA device: float32 GPU comparison skipped")
            return
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        gpu = LightVAE().cuda()
        with torch.no_grad():
            for p, w in zip(gpu.ordered_params(), model.ordered_params()):
                p.copy_(w.float())
        got = run(gpu, x.float().cuda(), eps.float().cuda())
        for key in ("mu", "logvar", "recon", "grad"):
            a, b = got[key].double().cpu(), ref[key]
            rel = ((a - b).abs().max() / b.abs().max()).item()
            print("gpu float32 vs cpu float64: %-7s max|diff|/max|ref| = %.3g" % (key, rel))
        print("gpu float32 loss %.9g vs %.9g (%s)" % (got["loss"], ref["loss"],
                                                      torch.cuda.get_device_name(0)))
    except Exception as exc:  # the fixture is already written
        print("gpu comparison failed:", exc)


if __name__ == "__main__":
    main()
