"""Train a ResNet-18 on CIFAR-10 on every visible GPU.

A realistic training script with the kind of bugs trainlint exists for. Run

    trainlint examples/train_buggy.py

to see them, and `trainlint --fix examples/train_buggy.py` to fix the safe ones.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
from torch.utils.data import DataLoader


def get_args():
    parser = argparse.ArgumentParser(description="CIFAR-10 training")
    parser.add_argument("--data", default="./data")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--gpu", type=int, default=0, help="GPU to train on")
    return parser.parse_args()


def build_loaders(args):
    normalize = T.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    train_tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), normalize])
    test_tf = T.Compose([T.ToTensor(), normalize])
    train_set = torchvision.datasets.CIFAR10(args.data, train=True, download=True, transform=train_tf)
    test_set = torchvision.datasets.CIFAR10(args.data, train=False, download=True, transform=test_tf)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    test_loader = DataLoader(test_set, batch_size=args.batch_size, shuffle=False, num_workers=args.workers)
    return train_loader, test_loader


def train_one_epoch(model, loader, optimizer, device, epoch):
    model.train()
    total_loss = 0.0
    start = time.time()
    for step, (images, labels) in enumerate(loader):
        images = images.to(device, non_blocking=True)
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss
        if step % 50 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.3f}")
    print(f"epoch {epoch}: mean loss {total_loss / len(loader):.3f} in {time.time() - start:.0f}s")


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        correct += (model(images).argmax(1) == labels).sum().item()
        total += labels.numel()
    return correct / total


def main():
    args = get_args()
    device = torch.device(f"cuda:{args.gpu}" if torch.cuda.is_available() else "cpu")
    train_loader, test_loader = build_loaders(args)

    model = torchvision.models.resnet18(num_classes=10)
    model = nn.DataParallel(model).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)

    best = 0.0
    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer, device, epoch)
        scheduler.step()
        accuracy = evaluate(model, test_loader, device)
        if accuracy > best:
            best = accuracy
            torch.save(model.state_dict(), "resnet18_cifar10.pt")
        print(f"epoch {epoch}: accuracy {accuracy:.2%} (best {best:.2%})")


if __name__ == "__main__":
    main()
