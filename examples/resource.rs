//! A resource of your own on Wharf's task queue: a bank account whose
//! balance is only touched inside its tasks, from many threads, with no lock.
//!
//! `cargo run -p wharf-examples --example resource`

use std::thread;

use wharf::taskq::{Lane, Scheduler, SchedulerConfig, TaskError, TaskQueue};

#[derive(Debug)]
struct Account {
    balance: i64,
}

#[derive(Debug, PartialEq)]
enum Withdraw {
    Done { left: i64 },
    Insufficient { balance: i64 },
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scheduler = Scheduler::new(&SchedulerConfig::default())?;
    let account = TaskQueue::new(Account { balance: 0 }, &scheduler);

    // Deposits from four threads, fire and forget.
    let depositors: Vec<_> = (0..4)
        .map(|_| {
            let account = account.clone();
            thread::spawn(move || -> Result<(), TaskError> {
                for _ in 0..1_000 {
                    account.execute(Lane::Normal, |a| a.balance += 1)?;
                }
                Ok(())
            })
        })
        .collect();
    for d in depositors {
        d.join().expect("depositor thread")?;
    }

    // A task validates first and mutates last, so it is atomic even if it
    // fails. Its result comes back through the future.
    let outcome = actix_rt::System::new().block_on(account.submit(|a| {
        if a.balance < 5_000 {
            return Withdraw::Insufficient { balance: a.balance };
        }
        a.balance -= 5_000;
        Withdraw::Done { left: a.balance }
    }))?;
    println!("withdraw 5000: {outcome:?}");
    println!("stats: {:?}", account.stats());
    Ok(())
}
